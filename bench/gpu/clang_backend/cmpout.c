/* Compares two output files of bench/gpu/launch_check.cu (`launch_check check <n> <out>`):
 * x and y (n*n floats each), the row sums (n floats) and the double axpy (n doubles).
 * Prints, per array, whether it is bit-identical, else how many elements differ and the
 * largest relative difference. Exit status 0 when every element agrees within <tol>
 * (relative to max(1, |a|)), 1 otherwise, 2 on bad input.
 *
 *   cmpout <a.bin> <b.bin> <n> [tol, default 1e-5]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
  if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(b);
    return NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

static int compare(const char *name, const unsigned char *a, const unsigned char *b,
                   size_t count, size_t size, double tol) {
  if (memcmp(a, b, count * size) == 0) {
    printf("%-6s %zu elements: identical\n", name, count);
    return 0;
  }
  size_t differ = 0;
  double worst = 0;
  for (size_t i = 0; i < count; i++) {
    double x, y;
    if (size == 4) {
      float fx, fy;
      memcpy(&fx, a + i * 4, 4);
      memcpy(&fy, b + i * 4, 4);
      x = fx;
      y = fy;
    } else {
      memcpy(&x, a + i * 8, 8);
      memcpy(&y, b + i * 8, 8);
    }
    if (memcmp(a + i * size, b + i * size, size) == 0) continue;
    differ++;
    double rel = fabs(x - y) / fmax(1.0, fabs(x));
    if (!(rel <= worst)) worst = rel; /* NaN counts as the worst */
  }
  printf("%-6s %zu elements: %zu differ, largest relative difference %.3g\n", name, count,
         differ, worst);
  return worst <= tol ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s <a.bin> <b.bin> <n> [tol]\n", argv[0]);
    return 2;
  }
  size_t n = strtoul(argv[3], NULL, 10), nn = n * n;
  double tol = argc > 4 ? atof(argv[4]) : 1e-5;
  size_t la, lb, want = nn * 4 * 2 + n * 4 + n * 8;
  unsigned char *a = slurp(argv[1], &la), *b = slurp(argv[2], &lb);
  if (!a || !b || la != want || lb != want) {
    fprintf(stderr, "cmpout: expected two files of %zu bytes\n", want);
    return 2;
  }
  int bad = 0;
  bad |= compare("x", a, b, nn, 4, tol);
  bad |= compare("y", a + nn * 4, b + nn * 4, nn, 4, tol);
  bad |= compare("rowsum", a + nn * 8, b + nn * 8, n, 4, tol);
  bad |= compare("yd", a + nn * 8 + n * 4, b + nn * 8 + n * 4, n, 8, tol);
  free(a);
  free(b);
  return bad;
}
