//! Grid formulas and block constraints: a small, typed integer expression language.
//!
//! ```text
//! expr    := or
//! or      := and ( "||" and )*
//! and     := cmp ( "&&" cmp )*
//! cmp     := sum ( ("==" | "!=" | "<" | "<=" | ">" | ">=") sum )?
//! sum     := product ( ("+" | "-") product )*
//! product := unary ( ("*" | "/" | "%") unary )*
//! unary   := ("-" | "!") unary | atom
//! atom    := integer | name | name "(" expr ("," expr)* ")" | "(" expr ")"
//! ```
//!
//! Names are the block dimensions `bx`, `by`, `bz` and the kernel's data parameters. The
//! functions are `ceil(a, b)` and `floor(a, b)` (division rounding up and down), `min(…)`
//! and `max(…)`, and `pow2(a)`, a truth value: `a` is a positive power of two (1, 2, 4, …).
//! `/` is `floor`, `%` its remainder. Every value is a 64-bit integer; a comparison,
//! `pow2`, `&&`, `||` and `!` give a truth value, and the two kinds never mix: the type
//! checker rejects `bx + (by < 2)`, `pow2(bx) * 2` and a grid formula that is a comparison.

use std::collections::BTreeSet;
use std::fmt;

/// An integer-valued expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntExpr {
    Lit(i64),
    Var(String),
    Neg(Box<IntExpr>),
    Bin(IntOp, Box<IntExpr>, Box<IntExpr>),
    /// `min(a, b, …)` / `max(a, b, …)` with at least one argument.
    Min(Vec<IntExpr>),
    Max(Vec<IntExpr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOp {
    Add,
    Sub,
    Mul,
    /// Division rounding towards minus infinity (`/` and `floor(a, b)`).
    FloorDiv,
    /// Division rounding towards plus infinity (`ceil(a, b)`).
    CeilDiv,
    /// Remainder of `FloorDiv`: same sign as the divisor.
    Mod,
}

/// A truth-valued expression (a block constraint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoolExpr {
    Cmp(CmpOp, IntExpr, IntExpr),
    And(Box<BoolExpr>, Box<BoolExpr>),
    Or(Box<BoolExpr>, Box<BoolExpr>),
    Not(Box<BoolExpr>),
    /// `pow2(a)`: `a` is a positive power of two.
    Pow2(IntExpr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// The operator as written in the expression language (and in C).
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// A parse or type error, at a byte offset into the expression text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
impl std::error::Error for ExprError {}

/// An evaluation error: division by zero, overflow, or a variable without a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvalError {
    DivisionByZero,
    Overflow,
    Unbound(String),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::DivisionByZero => f.write_str("division by zero"),
            EvalError::Overflow => f.write_str("64-bit integer overflow"),
            EvalError::Unbound(v) => write!(f, "no value for '{v}'"),
        }
    }
}
impl std::error::Error for EvalError {}

/// The block dimensions every expression may use.
pub const BLOCK_VARS: [&str; 3] = ["bx", "by", "bz"];

/// Parses an integer expression; `names` are the allowed variables besides `bx by bz`.
pub fn parse_int(text: &str, names: &[&str]) -> Result<IntExpr, ExprError> {
    let mut p = Parser::new(text, names)?;
    let e = p.expr()?;
    p.finish()?;
    check_depth(&e)?;
    e.into_int()
}

/// Parses a constraint; `names` are the allowed variables besides `bx by bz`.
pub fn parse_bool(text: &str, names: &[&str]) -> Result<BoolExpr, ExprError> {
    let mut p = Parser::new(text, names)?;
    let e = p.expr()?;
    p.finish()?;
    check_depth(&e)?;
    e.into_bool()
}

// ---------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Int(i64),
    Name(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
    End,
}

const OPS: [&str; 15] = [
    "==", "!=", "<=", ">=", "&&", "||", "<", ">", "+", "-", "*", "/", "%", "!", "=",
];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ExprError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let v = text[start..i].parse::<i64>().map_err(|_| ExprError {
                offset: start,
                message: format!("integer '{}' does not fit in 64 bits", &text[start..i]),
            })?;
            out.push((Tok::Int(v), start));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Name(text[start..i].to_string()), start));
            continue;
        }
        let tok = match c {
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b',' => Tok::Comma,
            _ => match OPS.iter().find(|op| text[i..].starts_with(**op)) {
                Some(&"=") => {
                    return Err(ExprError {
                        offset: start,
                        message: "'=' is not an operator here; write '==' to compare".into(),
                    })
                }
                Some(op) => Tok::Op(op),
                None => {
                    let ch = text[i..].chars().next().unwrap_or('?');
                    return Err(ExprError {
                        offset: start,
                        message: format!("unexpected character '{ch}'"),
                    });
                }
            },
        };
        i += match &tok {
            Tok::Op(op) => op.len(),
            _ => 1,
        };
        out.push((tok, start));
    }
    out.push((Tok::End, text.len()));
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Parser: builds an untyped tree, then checks types.

#[derive(Debug, Clone)]
enum Node {
    Int(i64),
    Var(String),
    Unary(&'static str, Box<(Node, usize)>),
    Bin(&'static str, Box<(Node, usize)>, Box<(Node, usize)>),
    Call(String, Vec<(Node, usize)>),
}

/// Limits of an expression: the parser and everything that walks its tree recurse, and a
/// pragma is no place for more. `MAX_DEPTH`: operations nested in one another in the parsed
/// tree (a chain `a + b + c` nests each `+` in the next); `MAX_NESTING`: parentheses, calls
/// and unary operators written inside one another (more than the tree's limit, so that the
/// text an expression prints to, parenthesised where precedence needs it, always parses
/// back); `MAX_NODES`: its operations and operands; `MAX_TOKENS`: its length as written
/// (four tokens a node: the printed form of any tree within `MAX_NODES` fits).
pub const MAX_DEPTH: usize = 64;
pub const MAX_NESTING: usize = 128;
pub const MAX_NODES: usize = 1000;
pub const MAX_TOKENS: usize = 4 * MAX_NODES;

/// Operations nested in one another in a parsed tree, and its nodes.
fn tree_size(n: &Node) -> (usize, usize) {
    let sub = |xs: &mut dyn Iterator<Item = &(Node, usize)>| {
        xs.map(|x| tree_size(&x.0))
            .fold((0, 0), |(d, c), (d2, c2)| (d.max(d2), c + c2))
    };
    let (d, c) = match n {
        Node::Int(_) | Node::Var(_) => return (0, 1),
        Node::Unary(_, e) => sub(&mut std::iter::once(&**e)),
        Node::Bin(_, a, b) => sub(&mut [&**a, &**b].into_iter()),
        Node::Call(_, args) => sub(&mut args.iter()),
    };
    (d + 1, c + 1)
}

/// Refuses a tree deeper than [`MAX_DEPTH`] or larger than [`MAX_NODES`].
fn check_depth(e: &(Node, usize)) -> Result<(), ExprError> {
    let (depth, nodes) = tree_size(&e.0);
    if nodes > MAX_NODES {
        return Err(ExprError {
            offset: 0,
            message: format!(
                "this expression has more than {MAX_NODES} operations and operands: write it \
                 shorter (an annotation's formulas are meant to be a few operations)"
            ),
        });
    }
    if depth > MAX_DEPTH {
        return Err(ExprError {
            offset: 0,
            message: format!(
                "this expression is more than {MAX_DEPTH} operations deep (nested \
                 parentheses, calls, unary operators, or a long chain of operators): write it \
                 shorter"
            ),
        });
    }
    Ok(())
}

struct Parser<'a> {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    names: &'a [&'a str],
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &str, names: &'a [&'a str]) -> Result<Self, ExprError> {
        let toks = lex(text)?;
        if toks.len() == 1 {
            return Err(ExprError {
                offset: 0,
                message: "expected an expression".into(),
            });
        }
        if toks.len() > MAX_TOKENS + 1 {
            return Err(ExprError {
                offset: toks[MAX_TOKENS].1,
                message: format!(
                    "this expression is longer than {MAX_TOKENS} tokens: write it shorter (an \
                     annotation's formulas are meant to be a few operations)"
                ),
            });
        }
        Ok(Parser {
            toks,
            pos: 0,
            names,
            depth: 0,
        })
    }

    /// Enters one level of nesting (a parenthesis, a call, a unary operator).
    fn nest(&mut self, at: usize) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(ExprError {
                offset: at,
                message: format!(
                    "this expression nests more than {MAX_NESTING} levels deep (parentheses, \
                     calls, unary operators): write it flatter"
                ),
            });
        }
        Ok(())
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }
    fn offset(&self) -> usize {
        self.toks[self.pos].1
    }
    fn bump(&mut self) -> (Tok, usize) {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }
    fn error<T>(&self, message: impl Into<String>) -> Result<T, ExprError> {
        Err(ExprError {
            offset: self.offset(),
            message: message.into(),
        })
    }
    fn finish(&self) -> Result<(), ExprError> {
        match self.peek() {
            Tok::End => Ok(()),
            t => self.error(format!("unexpected {} after the expression", describe(t))),
        }
    }

    fn expr(&mut self) -> Result<(Node, usize), ExprError> {
        self.binary_level(0)
    }

    /// Precedence climbing over the binary levels, loosest first.
    fn binary_level(&mut self, level: usize) -> Result<(Node, usize), ExprError> {
        const LEVELS: [&[&str]; 5] = [
            &["||"],
            &["&&"],
            &["==", "!=", "<", "<=", ">", ">="],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.binary_level(level + 1)?;
        while let Tok::Op(op) = *self.peek() {
            if !LEVELS[level].contains(&op) {
                break;
            }
            self.bump();
            let rhs = self.binary_level(level + 1)?;
            let at = lhs.1;
            lhs = (Node::Bin(op, Box::new(lhs), Box::new(rhs)), at);
            if level == 2 {
                if let Tok::Op(next) = *self.peek() {
                    if LEVELS[2].contains(&next) {
                        return self.error(
                            "comparisons do not chain; join them with '&&', e.g. 'a < b && b < c'",
                        );
                    }
                }
            }
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<(Node, usize), ExprError> {
        let at = self.offset();
        match *self.peek() {
            Tok::Op(op @ ("-" | "!")) => {
                self.bump();
                self.nest(at)?;
                let inner = self.unary()?;
                self.depth -= 1;
                Ok((Node::Unary(op, Box::new(inner)), at))
            }
            _ => self.atom(),
        }
    }

    fn atom(&mut self) -> Result<(Node, usize), ExprError> {
        let (tok, at) = self.bump();
        match tok {
            Tok::Int(v) => Ok((Node::Int(v), at)),
            Tok::LParen => {
                self.nest(at)?;
                let e = self.expr()?;
                self.depth -= 1;
                match self.bump().0 {
                    Tok::RParen => Ok(e),
                    t => Err(ExprError {
                        offset: self.toks[self.pos.saturating_sub(1)].1,
                        message: format!("expected ')' but found {}", describe(&t)),
                    }),
                }
            }
            Tok::Name(name) if *self.peek() == Tok::LParen => {
                if !FUNCTIONS.contains(&name.as_str()) {
                    return Err(ExprError {
                        offset: at,
                        message: format!(
                            "unknown function '{name}'; the functions are {}",
                            FUNCTIONS.join(", ")
                        ),
                    });
                }
                self.bump();
                self.nest(at)?;
                let mut args = vec![self.expr()?];
                loop {
                    match self.bump() {
                        (Tok::Comma, _) => args.push(self.expr()?),
                        (Tok::RParen, _) => {
                            self.depth -= 1;
                            break;
                        }
                        (t, off) => {
                            return Err(ExprError {
                                offset: off,
                                message: format!(
                                    "expected ',' or ')' in the arguments of '{name}', found {}",
                                    describe(&t)
                                ),
                            })
                        }
                    }
                }
                Ok((Node::Call(name, args), at))
            }
            Tok::Name(name) => {
                if BLOCK_VARS.contains(&name.as_str()) || self.names.contains(&name.as_str()) {
                    Ok((Node::Var(name), at))
                } else {
                    let mut known: Vec<&str> = BLOCK_VARS.to_vec();
                    known.extend(self.names.iter().copied());
                    Err(ExprError {
                        offset: at,
                        message: format!(
                            "unknown name '{name}'; the names are {}",
                            known.join(", ")
                        ),
                    })
                }
            }
            t => Err(ExprError {
                offset: at,
                message: format!("expected a number, a name or '(', found {}", describe(&t)),
            }),
        }
    }
}

/// The functions of the language (names a data label may not take).
pub const FUNCTIONS: [&str; 5] = ["ceil", "floor", "min", "max", "pow2"];

fn describe(t: &Tok) -> String {
    match t {
        Tok::Int(v) => format!("the number {v}"),
        Tok::Name(n) => format!("'{n}'"),
        Tok::Op(o) => format!("'{o}'"),
        Tok::LParen => "'('".into(),
        Tok::RParen => "')'".into(),
        Tok::Comma => "','".into(),
        Tok::End => "the end of the expression".into(),
    }
}

/// Type checking: an untyped node (with its offset) becomes an integer or a truth value.
trait Typed {
    fn into_int(self) -> Result<IntExpr, ExprError>;
    fn into_bool(self) -> Result<BoolExpr, ExprError>;
}

impl Typed for (Node, usize) {
    fn into_int(self) -> Result<IntExpr, ExprError> {
        let (node, at) = self;
        let not_int = |what: &str| ExprError {
            offset: at,
            message: format!("expected an integer here, but {what} is a truth value"),
        };
        Ok(match node {
            Node::Int(v) => IntExpr::Lit(v),
            Node::Var(v) => IntExpr::Var(v),
            Node::Unary("-", e) => IntExpr::Neg(Box::new(e.into_int()?)),
            Node::Unary(op, _) => return Err(not_int(&format!("'{op}…'"))),
            Node::Bin(op, a, b) => {
                let op = match op {
                    "+" => IntOp::Add,
                    "-" => IntOp::Sub,
                    "*" => IntOp::Mul,
                    "/" => IntOp::FloorDiv,
                    "%" => IntOp::Mod,
                    _ => return Err(not_int(&format!("a '{op}' expression"))),
                };
                IntExpr::Bin(op, Box::new(a.into_int()?), Box::new(b.into_int()?))
            }
            Node::Call(f, _) if f == "pow2" => return Err(not_int("'pow2(…)'")),
            Node::Call(f, args) => {
                let n = args.len();
                let args = args
                    .into_iter()
                    .map(|a| a.into_int())
                    .collect::<Result<Vec<_>, _>>()?;
                match f.as_str() {
                    "ceil" | "floor" if n != 2 => {
                        return Err(ExprError {
                            offset: at,
                            message: format!(
                                "'{f}' takes two arguments, {f}(a, b) = a / b rounded {}; \
                                 it was given {n}",
                                if f == "ceil" { "up" } else { "down" }
                            ),
                        })
                    }
                    "ceil" | "floor" => {
                        let mut it = args.into_iter();
                        let (a, b) = (it.next().unwrap(), it.next().unwrap());
                        let op = if f == "ceil" {
                            IntOp::CeilDiv
                        } else {
                            IntOp::FloorDiv
                        };
                        IntExpr::Bin(op, Box::new(a), Box::new(b))
                    }
                    "min" => IntExpr::Min(args),
                    _ => IntExpr::Max(args),
                }
            }
        })
    }

    fn into_bool(self) -> Result<BoolExpr, ExprError> {
        let (node, at) = self;
        let not_bool = || ExprError {
            offset: at,
            message: "expected a condition here (a comparison such as 'bx * by <= 512'), \
                      but this is an integer"
                .into(),
        };
        Ok(match node {
            Node::Unary("!", e) => BoolExpr::Not(Box::new(e.into_bool()?)),
            Node::Bin("&&", a, b) => {
                BoolExpr::And(Box::new(a.into_bool()?), Box::new(b.into_bool()?))
            }
            Node::Bin("||", a, b) => {
                BoolExpr::Or(Box::new(a.into_bool()?), Box::new(b.into_bool()?))
            }
            Node::Bin(op, a, b) => {
                let op = match op {
                    "==" => CmpOp::Eq,
                    "!=" => CmpOp::Ne,
                    "<" => CmpOp::Lt,
                    "<=" => CmpOp::Le,
                    ">" => CmpOp::Gt,
                    ">=" => CmpOp::Ge,
                    _ => return Err(not_bool()),
                };
                BoolExpr::Cmp(op, a.into_int()?, b.into_int()?)
            }
            Node::Call(f, args) if f == "pow2" => {
                if args.len() != 1 {
                    return Err(ExprError {
                        offset: at,
                        message: format!(
                            "'pow2' takes one argument, pow2(a) = a is a positive power of two; \
                             it was given {}",
                            args.len()
                        ),
                    });
                }
                let a = args.into_iter().next().unwrap_or((Node::Int(0), at));
                BoolExpr::Pow2(a.into_int()?)
            }
            _ => return Err(not_bool()),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Evaluation and printing

/// Values for the variables of an expression.
pub trait Env {
    fn get(&self, name: &str) -> Option<i64>;
}

impl Env for [(&str, i64)] {
    fn get(&self, name: &str) -> Option<i64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}
impl<const N: usize> Env for [(&str, i64); N] {
    fn get(&self, name: &str) -> Option<i64> {
        Env::get(self.as_slice(), name)
    }
}

fn floor_div(a: i64, b: i64) -> Result<i64, EvalError> {
    if b == 0 {
        return Err(EvalError::DivisionByZero);
    }
    let q = a.checked_div(b).ok_or(EvalError::Overflow)?;
    Ok(if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

fn ceil_div(a: i64, b: i64) -> Result<i64, EvalError> {
    if b == 0 {
        return Err(EvalError::DivisionByZero);
    }
    let q = a.checked_div(b).ok_or(EvalError::Overflow)?;
    Ok(if (a % b != 0) && ((a < 0) == (b < 0)) {
        q + 1
    } else {
        q
    })
}

impl IntExpr {
    pub fn eval(&self, env: &(impl Env + ?Sized)) -> Result<i64, EvalError> {
        use IntExpr::*;
        Ok(match self {
            Lit(v) => *v,
            Var(n) => env.get(n).ok_or_else(|| EvalError::Unbound(n.clone()))?,
            Neg(e) => e.eval(env)?.checked_neg().ok_or(EvalError::Overflow)?,
            Bin(op, a, b) => {
                let (a, b) = (a.eval(env)?, b.eval(env)?);
                match op {
                    IntOp::Add => a.checked_add(b).ok_or(EvalError::Overflow)?,
                    IntOp::Sub => a.checked_sub(b).ok_or(EvalError::Overflow)?,
                    IntOp::Mul => a.checked_mul(b).ok_or(EvalError::Overflow)?,
                    IntOp::FloorDiv => floor_div(a, b)?,
                    IntOp::CeilDiv => ceil_div(a, b)?,
                    IntOp::Mod => a
                        .checked_sub(floor_div(a, b)?.checked_mul(b).ok_or(EvalError::Overflow)?)
                        .ok_or(EvalError::Overflow)?,
                }
            }
            Min(args) => fold(args, env, i64::min)?,
            Max(args) => fold(args, env, i64::max)?,
        })
    }

    /// The variables the expression reads.
    pub fn vars(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.collect_vars(&mut out);
        out
    }

    fn collect_vars<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            IntExpr::Lit(_) => {}
            IntExpr::Var(v) => {
                out.insert(v);
            }
            IntExpr::Neg(e) => e.collect_vars(out),
            IntExpr::Bin(_, a, b) => {
                a.collect_vars(out);
                b.collect_vars(out);
            }
            IntExpr::Min(args) | IntExpr::Max(args) => {
                args.iter().for_each(|a| a.collect_vars(out))
            }
        }
    }
}

fn fold(
    args: &[IntExpr],
    env: &(impl Env + ?Sized),
    f: fn(i64, i64) -> i64,
) -> Result<i64, EvalError> {
    let mut acc = args[0].eval(env)?;
    for a in &args[1..] {
        acc = f(acc, a.eval(env)?);
    }
    Ok(acc)
}

/// Whether `v` is a positive power of two (`pow2(v)`).
pub fn is_pow2(v: i64) -> bool {
    v > 0 && v & (v - 1) == 0
}

impl BoolExpr {
    pub fn eval(&self, env: &(impl Env + ?Sized)) -> Result<bool, EvalError> {
        Ok(match self {
            BoolExpr::Cmp(op, a, b) => {
                let (a, b) = (a.eval(env)?, b.eval(env)?);
                match op {
                    CmpOp::Eq => a == b,
                    CmpOp::Ne => a != b,
                    CmpOp::Lt => a < b,
                    CmpOp::Le => a <= b,
                    CmpOp::Gt => a > b,
                    CmpOp::Ge => a >= b,
                }
            }
            BoolExpr::And(a, b) => a.eval(env)? && b.eval(env)?,
            BoolExpr::Or(a, b) => a.eval(env)? || b.eval(env)?,
            BoolExpr::Not(a) => !a.eval(env)?,
            BoolExpr::Pow2(a) => is_pow2(a.eval(env)?),
        })
    }
}

/// Prints in the expression language itself, fully parenthesised where precedence needs it;
/// parsing the printed text gives back the same tree.
impl fmt::Display for IntExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntExpr::Lit(v) if *v < 0 => write!(f, "({v})"),
            IntExpr::Lit(v) => write!(f, "{v}"),
            IntExpr::Var(v) => f.write_str(v),
            IntExpr::Neg(e) => write!(f, "-({e})"),
            IntExpr::Bin(IntOp::CeilDiv, a, b) => write!(f, "ceil({a}, {b})"),
            IntExpr::Bin(op, a, b) => {
                let s = match op {
                    IntOp::Add => "+",
                    IntOp::Sub => "-",
                    IntOp::Mul => "*",
                    IntOp::FloorDiv => "/",
                    IntOp::Mod => "%",
                    IntOp::CeilDiv => unreachable!(),
                };
                write!(f, "({a} {s} {b})")
            }
            IntExpr::Min(args) | IntExpr::Max(args) => {
                f.write_str(if matches!(self, IntExpr::Min(_)) {
                    "min("
                } else {
                    "max("
                })?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl fmt::Display for BoolExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BoolExpr::Cmp(op, a, b) => {
                let s = op.symbol();
                write!(f, "({a} {s} {b})")
            }
            BoolExpr::And(a, b) => write!(f, "({a} && {b})"),
            BoolExpr::Or(a, b) => write!(f, "({a} || {b})"),
            BoolExpr::Not(a) => write!(f, "!{a}"),
            BoolExpr::Pow2(a) => write!(f, "pow2({a})"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// C emission

/// The C helpers [`IntExpr::to_c`] and [`BoolExpr::to_c`] call. Each sets `*err` on division
/// by zero or overflow (and returns 0), so a formula that cannot be evaluated is detected
/// rather than giving a wrong grid.
pub const C_PRELUDE: &str = r#"static inline int64_t kl_add(int64_t a, int64_t b, int *err) { int64_t r; if (__builtin_add_overflow(a, b, &r)) { *err = 1; return 0; } return r; }
static inline int64_t kl_sub(int64_t a, int64_t b, int *err) { int64_t r; if (__builtin_sub_overflow(a, b, &r)) { *err = 1; return 0; } return r; }
static inline int64_t kl_mul(int64_t a, int64_t b, int *err) { int64_t r; if (__builtin_mul_overflow(a, b, &r)) { *err = 1; return 0; } return r; }
static inline int64_t kl_neg(int64_t a, int *err) { if (a == INT64_MIN) { *err = 1; return 0; } return -a; }
/* Division rounding down (/ and floor(a, b)) and up (ceil(a, b)); % is the remainder of the former. */
static inline int64_t kl_floordiv(int64_t a, int64_t b, int *err) { if (b == 0 || (a == INT64_MIN && b == -1)) { *err = 1; return 0; } int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t kl_ceildiv(int64_t a, int64_t b, int *err) { if (b == 0 || (a == INT64_MIN && b == -1)) { *err = 1; return 0; } int64_t q = a / b; return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q; }
static inline int64_t kl_mod(int64_t a, int64_t b, int *err) { int64_t q = kl_floordiv(a, b, err); return *err ? 0 : a - q * b; }
static inline int64_t kl_imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kl_imax(int64_t a, int64_t b) { return a > b ? a : b; }
/* pow2(a): a is a positive power of two. */
static inline int kl_pow2(int64_t a) { return a > 0 && (a & (a - 1)) == 0; }
"#;

impl IntExpr {
    /// C99 text computing the expression with the helpers of [`C_PRELUDE`]; `var` maps each
    /// variable to a C expression of type `int64_t`, and `err` names an `int *`.
    pub fn to_c(&self, var: &dyn Fn(&str) -> String, err: &str) -> String {
        match self {
            IntExpr::Lit(v) if *v == i64::MIN => "INT64_MIN".into(),
            IntExpr::Lit(v) => format!("INT64_C({v})"),
            IntExpr::Var(v) => var(v),
            IntExpr::Neg(e) => format!("kl_neg({}, {err})", e.to_c(var, err)),
            IntExpr::Bin(op, a, b) => {
                let f = match op {
                    IntOp::Add => "kl_add",
                    IntOp::Sub => "kl_sub",
                    IntOp::Mul => "kl_mul",
                    IntOp::FloorDiv => "kl_floordiv",
                    IntOp::CeilDiv => "kl_ceildiv",
                    IntOp::Mod => "kl_mod",
                };
                format!("{f}({}, {}, {err})", a.to_c(var, err), b.to_c(var, err))
            }
            IntExpr::Min(args) | IntExpr::Max(args) => {
                let f = if matches!(self, IntExpr::Min(_)) {
                    "kl_imin"
                } else {
                    "kl_imax"
                };
                let mut it = args.iter().map(|a| a.to_c(var, err));
                let first = it.next().unwrap_or_default();
                it.fold(first, |acc, a| format!("{f}({acc}, {a})"))
            }
        }
    }
}

impl BoolExpr {
    /// C99 text (an `int`, 0 or 1); see [`IntExpr::to_c`].
    pub fn to_c(&self, var: &dyn Fn(&str) -> String, err: &str) -> String {
        match self {
            BoolExpr::Cmp(op, a, b) => {
                let s = op.symbol();
                format!("({} {s} {})", a.to_c(var, err), b.to_c(var, err))
            }
            BoolExpr::And(a, b) => format!("({} && {})", a.to_c(var, err), b.to_c(var, err)),
            BoolExpr::Or(a, b) => format!("({} || {})", a.to_c(var, err), b.to_c(var, err)),
            BoolExpr::Not(a) => format!("!{}", a.to_c(var, err)),
            BoolExpr::Pow2(a) => format!("kl_pow2({})", a.to_c(var, err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_or_long_expressions_are_errors_not_stack_overflows() {
        let deep = format!("{}N{}", "(".repeat(300), ")".repeat(300));
        let e = parse_int(&deep, &["N"]).unwrap_err();
        assert!(
            e.message.contains("nests more than 128 levels"),
            "{}",
            e.message
        );
        assert_eq!(e.offset, MAX_NESTING);
        // The issue's 5 000 levels: refused before any recursion.
        let deeper = format!("{}N{}", "(".repeat(5000), ")".repeat(5000));
        assert!(parse_int(&deeper, &["N"]).is_err());
        let unary = format!("{}N", "-".repeat(500));
        assert!(parse_int(&unary, &["N"]).is_err());
        let calls = format!("{}N{}", "min(".repeat(100), ", 1)".repeat(100));
        let e = parse_int(&calls, &["N"]).unwrap_err();
        assert!(
            e.message.contains("more than 64 operations deep"),
            "{}",
            e.message
        );
        let long = vec!["N"; 5000].join(" + ");
        let e = parse_int(&long, &["N"]).unwrap_err();
        assert!(
            e.message.contains("longer than 4000 tokens"),
            "{}",
            e.message
        );
        let wide = format!("min({})", vec!["N"; 1500].join(", "));
        let e = parse_int(&wide, &["N"]).unwrap_err();
        assert!(
            e.message.contains("more than 1000 operations and operands"),
            "{}",
            e.message
        );
        // Found by fuzzing: a chain of negations and subtractions within the limits as written
        // printed to more tokens than the limit allowed.
        let found = format!(
            "{}0{}",
            "-".repeat(19),
            format!(" - {}0", "-".repeat(17)).repeat(20)
        );
        let e = parse_int(&found, &[]).unwrap();
        let printed = e.to_string();
        assert!(printed.len() > found.len() * 2, "{printed}");
        assert_eq!(parse_int(&printed, &[]).unwrap(), e);
        let chain = vec!["N"; 100].join(" + ");
        assert!(parse_int(&chain, &["N"]).is_err());
        assert!(parse_bool(&format!("{chain} > 0"), &["N"]).is_err());
        // Within the limits all is as before, and what parses prints to text that parses
        // back to the same tree (the fuzz target's property; found broken at 46 minus signs).
        let ok = format!("{}N{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert_eq!(
            parse_int(&ok, &["N"]).unwrap().eval(&[("N", 3)]).unwrap(),
            3
        );
        let sum = vec!["N"; MAX_DEPTH + 1].join(" + ");
        let e = parse_int(&sum, &["N"]).unwrap();
        assert_eq!(e.eval(&[("N", 2)]).unwrap(), 2 * (MAX_DEPTH as i64 + 1));
        assert_eq!(parse_int(&e.to_string(), &["N"]).unwrap(), e);
        for n in [46, MAX_DEPTH] {
            let neg = format!("{}88", "-".repeat(n));
            let e = parse_int(&neg, &[]).unwrap();
            assert_eq!(parse_int(&e.to_string(), &[]).unwrap(), e, "{n}");
        }
    }

    #[test]
    fn grid_formula_evaluates_in_integers() {
        let e = parse_int("ceil(N, bx) * 2 - N / 3 + N % 5", &["N"]).unwrap();
        assert_eq!(e.eval(&[("N", 100), ("bx", 32)]).unwrap(), 4 * 2 - 33);
        let e = parse_int("min(N, 7, bx) + max(-3, -N)", &["N"]).unwrap();
        assert_eq!(e.eval(&[("N", 5), ("bx", 9)]).unwrap(), 5 - 3);
    }

    #[test]
    fn rounding_follows_the_mathematics_for_negative_numbers() {
        assert_eq!(floor_div(-7, 2), Ok(-4));
        assert_eq!(ceil_div(-7, 2), Ok(-3));
        assert_eq!(ceil_div(7, 2), Ok(4));
        let m = parse_int("(0 - 7) % 3", &[]).unwrap();
        assert_eq!(m.eval(&[("x", 0)]).unwrap(), 2);
    }

    #[test]
    fn errors_point_at_the_offending_text() {
        let e = parse_int("ceil(N, bq)", &["N"]).unwrap_err();
        assert_eq!(e.offset, 8);
        assert_eq!(e.message, "unknown name 'bq'; the names are bx, by, bz, N");
        let e = parse_bool("bx * by", &[]).unwrap_err();
        assert!(e.message.starts_with("expected a condition"), "{e}");
        let e = parse_int("bx < 3", &[]).unwrap_err();
        assert!(e.message.contains("truth value"), "{e}");
        let e = parse_bool("bx = 32", &[]).unwrap_err();
        assert_eq!((e.offset, e.message.contains("'=='")), (3, true));
        assert_eq!(parse_bool("1 < bx < 3", &[]).unwrap_err().offset, 7);
        assert_eq!(parse_int("ceil(bx)", &[]).unwrap_err().offset, 0);
        assert!(parse_int("", &[]).is_err());
        assert!(parse_int("(bx", &[]).is_err());
        assert!(parse_int("99999999999999999999", &[]).is_err());
        assert!(parse_int("sqrt(bx)", &[])
            .unwrap_err()
            .message
            .contains("unknown function"));
    }

    #[test]
    fn evaluation_errors_are_values_not_panics() {
        let e = parse_int("N / (bx - 32)", &["N"]).unwrap();
        assert_eq!(
            e.eval(&[("N", 1), ("bx", 32)]),
            Err(EvalError::DivisionByZero)
        );
        let e = parse_int("N * N", &["N"]).unwrap();
        assert_eq!(e.eval(&[("N", i64::MAX)]), Err(EvalError::Overflow));
        assert_eq!(e.eval(&[("M", 1)]), Err(EvalError::Unbound("N".into())));
    }

    #[test]
    fn pow2_is_a_truth_value_of_one_integer() {
        let c = parse_bool("pow2(bx) && bx >= 32", &[]).unwrap();
        assert_eq!(
            c,
            BoolExpr::And(
                Box::new(BoolExpr::Pow2(IntExpr::Var("bx".into()))),
                Box::new(BoolExpr::Cmp(
                    CmpOp::Ge,
                    IntExpr::Var("bx".into()),
                    IntExpr::Lit(32)
                ))
            )
        );
        let allowed: Vec<i64> = (0..=1100)
            .filter(|&bx| c.eval(&[("bx", bx)]).unwrap())
            .collect();
        assert_eq!(allowed, [32, 64, 128, 256, 512, 1024]);
        // Every power of two of 64 bits, and nothing else: zero, negatives, i64::MIN.
        let p = parse_bool("pow2(N)", &["N"]).unwrap();
        for k in 0..63 {
            assert_eq!(p.eval(&[("N", 1i64 << k)]), Ok(true), "2^{k}");
            assert_eq!(p.eval(&[("N", -(1i64 << k))]), Ok(false), "-2^{k}");
        }
        for v in [0, 3, 6, 12, 96, 1023, 1025, i64::MAX, i64::MIN] {
            assert_eq!(p.eval(&[("N", v)]), Ok(false), "{v}");
        }
        // Its argument is any integer expression; evaluation errors are the argument's.
        let q = parse_bool("!pow2(bx * by) || pow2(N / (bz - 1))", &["N"]).unwrap();
        let env = |bx, by, bz| [("bx", bx), ("by", by), ("bz", bz), ("N", 64)];
        assert_eq!(q.eval(&env(3, 4, 1)), Ok(true));
        assert_eq!(q.eval(&env(4, 4, 3)), Ok(true));
        assert_eq!(q.eval(&env(4, 4, 4)), Ok(false));
        assert_eq!(q.eval(&env(4, 4, 1)), Err(EvalError::DivisionByZero));
        // Printing round-trips.
        for b in [&c, &p, &q] {
            assert_eq!(parse_bool(&b.to_string(), &["N"]).unwrap(), *b);
        }
        assert_eq!(q.to_string(), "(!pow2((bx * by)) || pow2((N / (bz - 1))))");
    }

    #[test]
    fn pow2_errors() {
        // A truth value, not an integer.
        let e = parse_int("ceil(N, 2) + pow2(N)", &["N"]).unwrap_err();
        assert_eq!(e.offset, 13);
        assert!(e.message.contains("'pow2(…)' is a truth value"), "{e}");
        assert!(parse_bool("pow2(bx) * 2 > 1", &[]).is_err());
        assert!(parse_bool("pow2(bx) == 1", &[]).is_err());
        // One integer argument.
        let e = parse_bool("pow2(bx, by)", &[]).unwrap_err();
        assert!(e.message.contains("'pow2' takes one argument"), "{e}");
        assert_eq!(e.offset, 0);
        assert!(parse_bool("pow2(bx > 2)", &[])
            .unwrap_err()
            .message
            .contains("integer"));
        assert!(parse_bool("pow2()", &[]).is_err());
        // Listed with the other functions.
        let e = parse_bool("ispow2(bx)", &[]).unwrap_err();
        assert_eq!(
            e.message,
            "unknown function 'ispow2'; the functions are ceil, floor, min, max, pow2"
        );
    }

    #[test]
    fn pow2_in_c() {
        let c = parse_bool("pow2(bx) && !pow2(N - bx)", &["N"]).unwrap();
        let text = c.to_c(&|v| format!("v_{v}"), "&err");
        assert_eq!(text, "(kl_pow2(v_bx) && !kl_pow2(kl_sub(v_N, v_bx, &err)))");
        assert!(C_PRELUDE.contains("static inline int kl_pow2(int64_t a)"));
    }

    #[test]
    fn printing_round_trips() {
        for src in ["ceil(N, bx) + -(3 * by) % 4", "min(bx, max(1, N / 2))"] {
            let e = parse_int(src, &["N"]).unwrap();
            assert_eq!(parse_int(&e.to_string(), &["N"]).unwrap(), e);
        }
        let b = parse_bool("bx % 32 == 0 && !(bx * by > 512) || bz != 1", &[]).unwrap();
        assert_eq!(parse_bool(&b.to_string(), &[]).unwrap(), b);
    }
}
