//! Summary statistics of timed runs.

/// The median: the middle value, or the mean of the two middle values of an even count.
/// `None` for no values or when a value is NaN.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn odd_count_takes_the_middle_of_the_sorted_values() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[0.25]), Some(0.25));
        assert_eq!(median(&[9.0, 0.5, 0.7, 0.6, 100.0]), Some(0.7));
    }

    #[test]
    fn even_count_averages_the_two_middle_values() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, 1.0]), Some(1.0));
    }

    #[test]
    fn nothing_or_nan_has_no_median() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN, 2.0]), None);
    }
}
