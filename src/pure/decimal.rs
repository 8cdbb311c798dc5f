//! Decimal text to `f64`, exactly as `str::parse::<f64>` reads it, for finite results.
//!
//! Why not `str::parse`: core's float parser carries a 10 KB table of powers of five and a
//! big-decimal slow path, about 14 KiB of the Worker's gzip bundle, for the one place that
//! reads a number out of a string (a form field's default). This one is small and slow: short
//! inputs take the exact fast path (one IEEE operation on exact operands), the rest is computed
//! with big integers and rounded half to even by hand. The tests hold it to `str::parse`, bit
//! for bit, on edge cases, exact ties and random inputs.

use std::cmp::Ordering;

/// `s.parse::<f64>()` when that is `Ok` and finite; `None` when `s` is not a number in Rust's
/// float grammar (`[+-]` then digits with an optional `.` and exponent) or names an infinite
/// value (`inf`, `NaN`, `1e999`).
pub fn parse_finite_f64(s: &str) -> Option<f64> {
    let (negative, digits, exp10) = parse_grammar(s.as_bytes())?;
    let magnitude = magnitude(&digits, exp10)?;
    Some(if negative { -magnitude } else { magnitude })
}

/// More significant digits than any tie between two `f64`s has (767): past these, only
/// whether the rest is zero matters.
const MAX_DIGITS: usize = 800;

/// The sign, the significant digits (0–9, no leading or trailing zeros, at most
/// `MAX_DIGITS + 1`) and the exponent: the value is `digits × 10^exp10`.
fn parse_grammar(s: &[u8]) -> Option<(bool, Vec<u8>, i64)> {
    let (negative, s) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut digits = Vec::new();
    let mut exp10: i64 = 0;
    let mut seen_digit = false;
    let mut i = 0;
    while let Some(d) = s.get(i).filter(|c| c.is_ascii_digit()) {
        seen_digit = true;
        if !digits.is_empty() || *d != b'0' {
            digits.push(d - b'0');
        }
        i += 1;
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        while let Some(d) = s.get(i).filter(|c| c.is_ascii_digit()) {
            seen_digit = true;
            if !digits.is_empty() || *d != b'0' {
                digits.push(d - b'0');
            }
            exp10 -= 1;
            i += 1;
        }
    }
    if !seen_digit {
        return None;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        let negative_exp = match s.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        // Saturates: past 2^40 the value is infinite or zero whatever the digits.
        let mut e: i64 = 0;
        while let Some(d) = s.get(i).filter(|c| c.is_ascii_digit()) {
            e = (e * 10 + i64::from(d - b'0')).min(1 << 40);
            i += 1;
        }
        if i == start {
            return None;
        }
        exp10 += if negative_exp { -e } else { e };
    }
    if i != s.len() {
        return None;
    }
    while digits.last() == Some(&0) {
        digits.pop();
        exp10 += 1;
    }
    if digits.len() > MAX_DIGITS {
        // The last digit is not zero, so what is cut is not zero: a 1 past the kept digits
        // stands for it (it moves the value across no tie, which has at most 767 digits).
        exp10 += (digits.len() - MAX_DIGITS - 1) as i64;
        digits.truncate(MAX_DIGITS);
        digits.push(1);
    }
    Some((negative, digits, exp10))
}

/// `digits × 10^exp10` rounded to the nearest `f64` (ties to even), or `None` when that is
/// infinite.
fn magnitude(digits: &[u8], exp10: i64) -> Option<f64> {
    if digits.is_empty() {
        return Some(0.0);
    }
    let n = digits.len() as i64;
    if n - 1 + exp10 >= 309 {
        return None; // at least 1e309
    }
    if n + exp10 <= -324 {
        return Some(0.0); // below 1e-324, under half the least subnormal (2.47e-324)
    }
    // Exact operands (below 2^53, and 10^22 is the largest exact power of ten), one rounding.
    if n <= 15 && (-22..=22).contains(&exp10) {
        let m = digits.iter().fold(0u64, |m, &d| m * 10 + u64::from(d)) as f64;
        let p = POW10[exp10.unsigned_abs() as usize];
        return Some(if exp10 >= 0 { m * p } else { m / p });
    }
    let mut m = Big::default();
    for &d in digits {
        m.mul_small(10);
        m.add_small(u32::from(d));
    }
    if exp10 >= 0 {
        m.mul_pow10(exp10 as u32);
        // An integer: its top 64 bits, and whether any bit below them is set.
        let bits = m.bits();
        let shift = bits.saturating_sub(64);
        let top = m.top_u64(shift);
        round(u128::from(top), shift as i64, m.any_below(shift))
    } else {
        // A quotient m / 10^-exp10, taken to 66 or 67 bits, and whether it is exact.
        let mut d = Big::default();
        d.add_small(1);
        d.mul_pow10(exp10.unsigned_abs() as u32);
        let diff = m.bits() as i64 - d.bits() as i64;
        let exp2 = diff - 66;
        if exp2 < 0 {
            m.shl(exp2.unsigned_abs() as u32);
        } else {
            d.shl(exp2 as u32);
        }
        let mut q: u128 = 0;
        for k in (0..=67).rev() {
            let mut dk = d.clone();
            dk.shl(k);
            if m.cmp(&dk) != Ordering::Less {
                m.sub(&dk);
                q |= 1 << k;
            }
        }
        round(q, exp2, !m.is_zero())
    }
}

/// The `f64` nearest `(top + f) × 2^exp2`, where `f` is 0 when `!sticky` and in (0, 1)
/// otherwise; ties to even; `None` when infinite. `top` is not 0 and, when `sticky`, has more
/// than 53 bits.
fn round(top: u128, exp2: i64, sticky: bool) -> Option<f64> {
    let len = i64::from(128 - top.leading_zeros());
    let lead = len - 1 + exp2; // the value is in [2^lead, 2^(lead + 1))
    if lead > 1023 {
        return None;
    }
    // 53 bits of precision for normal numbers, fewer below 2^-1022.
    let precision = if lead >= -1022 { 53 } else { lead + 1075 };
    let drop = len - precision;
    let (kept, exp2) = if drop <= 0 {
        (top << drop.unsigned_abs(), exp2 + drop)
    } else if drop > len {
        return Some(0.0); // under half the least subnormal
    } else {
        let drop = drop as u32;
        let kept = top >> drop;
        let rest = top & ((1u128 << drop) - 1);
        let half = 1u128 << (drop - 1);
        let up = rest > half || (rest == half && (sticky || kept & 1 == 1));
        (kept + u128::from(up), exp2 + i64::from(drop))
    };
    // `kept` is at most 2^53, so exact as an f64; scaling by powers of two is exact too, as
    // the result needs no more precision than it has.
    let mut f = kept as f64;
    let mut e = exp2;
    while e > 1023 {
        f *= pow2(1023);
        e -= 1023;
    }
    while e < -1022 {
        f *= pow2(-1022);
        e += 1022;
    }
    f *= pow2(e);
    f.is_finite().then_some(f)
}

/// 2^e for -1022 ≤ e ≤ 1023.
fn pow2(e: i64) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// A natural number: 32-bit limbs, least significant first, no zero limbs on top.
#[derive(Clone, Default)]
struct Big(Vec<u32>);

impl Big {
    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn mul_small(&mut self, k: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(k) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn add_small(&mut self, k: u32) {
        let mut carry = u64::from(k);
        for limb in &mut self.0 {
            if carry == 0 {
                return;
            }
            let v = u64::from(*limb) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow10(&mut self, mut e: u32) {
        while e >= 9 {
            self.mul_small(1_000_000_000);
            e -= 9;
        }
        self.mul_small(10u32.pow(e));
    }

    fn shl(&mut self, bits: u32) {
        if self.is_zero() {
            return;
        }
        let (limbs, bits) = ((bits / 32) as usize, bits % 32);
        if bits > 0 {
            let mut carry = 0u32;
            for limb in &mut self.0 {
                let v = (*limb << bits) | carry;
                carry = *limb >> (32 - bits);
                *limb = v;
            }
            if carry > 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, limbs));
    }

    fn bits(&self) -> u32 {
        match self.0.last() {
            None => 0,
            Some(top) => 32 * self.0.len() as u32 - top.leading_zeros(),
        }
    }

    fn bit(&self, i: u32) -> bool {
        self.0.get((i / 32) as usize).is_some_and(|limb| limb >> (i % 32) & 1 == 1)
    }

    /// The bits from `shift` up (at most 64 of them).
    fn top_u64(&self, shift: u32) -> u64 {
        (0..64).filter(|&i| self.bit(shift + i)).fold(0, |v, i| v | 1 << i)
    }

    fn any_below(&self, shift: u32) -> bool {
        (0..shift).any(|i| self.bit(i))
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    /// `self - other`, for `other <= self`.
    fn sub(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let v = i64::from(*limb) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            *limb = v.rem_euclid(1 << 32) as u32;
            borrow = i64::from(v < 0);
        }
        self.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: what `str::parse` says, as this module answers it.
    fn reference(s: &str) -> Option<u64> {
        s.parse::<f64>().ok().filter(|f| f.is_finite()).map(f64::to_bits)
    }

    fn check(s: &str) {
        assert_eq!(parse_finite_f64(s).map(f64::to_bits), reference(s), "{s:?}");
    }

    #[test]
    fn grammar_is_rusts() {
        for s in [
            "",
            "+",
            "-",
            ".",
            "+.",
            "e",
            "e5",
            ".e5",
            "1e",
            "1e+",
            "1e-",
            "1.2.3",
            "1e5.5",
            "1e5e5",
            "--1",
            "+-1",
            " 1",
            "1 ",
            "1_000",
            "0x10",
            "1f",
            "1d",
            "１",
            "1,5",
            "inf",
            "-inf",
            "+infinity",
            "Infinity",
            "INF",
            "nan",
            "NaN",
            "-nan",
            "infx",
            "0",
            "-0",
            "+0",
            "00",
            "007",
            "0.",
            ".0",
            "-.5",
            "+.5",
            "5.",
            "5.e3",
            "5.E-3",
            "1e0",
            "1E+05",
            "1e-0",
            "0e0",
            "-0.0e-5",
            "000.000",
            "1e0000000000000000000005",
            "1e99999999999999999999999",
            "1e-99999999999999999999999",
            "0e99999999999999999999999",
            "123456789012345678901234567890",
        ] {
            check(s);
        }
    }

    #[test]
    fn edge_values() {
        for s in [
            "9007199254740992",
            "9007199254740993",
            "9007199254740995",
            "9007199254740993.0000000000000000001",
            "1.7976931348623157e308",
            "1.7976931348623158e308",
            "1.7976931348623159e308",
            "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497791.9999999",
            "2.2250738585072011e-308",
            "2.2250738585072012e-308",
            "2.2250738585072014e-308",
            "4.9406564584124654e-324",
            "2.4703282292062327e-324",
            "2.4703282292062328e-324",
            "2.47032822920623272e-324",
            "1e-324",
            "3e-324",
            "5e-324",
            "1e-400",
            "1e308",
            "1e309",
            "0.1",
            "0.2",
            "0.3",
            "1e22",
            "1e23",
            "123456789012345e-22",
            "1234567890123456e-22",
            "8.98846567431158e307",
            "1.0000000000000002",
            "1.00000000000000011102230246251565404236316680908203125",
            "1.00000000000000011102230246251565404236316680908203124",
            "1.00000000000000011102230246251565404236316680908203126",
            "7.2057594037927933e16",
            "3.0540412e5",
            "0.000000000000000000000000000000000000000000001",
        ] {
            check(s);
            check(&format!("-{s}"));
        }
    }

    #[test]
    fn long_inputs_keep_their_tail() {
        // A tie whose deciding digit lies past MAX_DIGITS.
        let tie = format!("9007199254740993{}", "0".repeat(900));
        check(&tie);
        check(&format!("{tie}1"));
        check(&format!("9007199254740992{}1e-5", "9".repeat(900)));
        check(&format!("0.{}1", "0".repeat(1000)));
        check(&"7".repeat(5000));
    }

    use crate::pure::test_rng::Rng;

    #[test]
    fn random_texts_read_as_rust_reads_them() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let len = rng.below(9) as usize;
            let s: String = (0..len).map(|_| b"0123456789.eE+-"[rng.below(15) as usize] as char).collect();
            check(&s);
        }
        for _ in 0..60_000 {
            let mut s = String::new();
            match rng.below(3) {
                0 => s.push('-'),
                1 => s.push('+'),
                _ => {}
            }
            for _ in 0..rng.below(25) {
                s.push((b'0' + rng.below(10) as u8) as char);
            }
            if rng.below(2) == 0 {
                s.push('.');
                for _ in 0..rng.below(25) {
                    s.push((b'0' + rng.below(10) as u8) as char);
                }
            }
            if rng.below(2) == 0 {
                s.push(if rng.below(2) == 0 { 'e' } else { 'E' });
                s.push_str(&(rng.below(800) as i64 - 400).to_string());
            }
            check(&s);
        }
    }

    /// The exact decimal text of `m × 2^e`.
    fn exact(m: u64, e: i64) -> String {
        let mut big = Big::default();
        big.add_small((m >> 32) as u32);
        big.shl(32);
        big.add_small(m as u32);
        if e >= 0 {
            big.shl(e as u32);
            decimal(&big)
        } else {
            for _ in 0..-e {
                big.mul_small(5);
            }
            format!("{}e{e}", decimal(&big))
        }
    }

    fn decimal(big: &Big) -> String {
        let mut limbs = big.0.clone();
        let mut out = Vec::new();
        while !limbs.is_empty() {
            let mut rem = 0u64;
            for limb in limbs.iter_mut().rev() {
                let v = (rem << 32) | u64::from(*limb);
                *limb = (v / 10) as u32;
                rem = v % 10;
            }
            out.push(b'0' + rem as u8);
            while limbs.last() == Some(&0) {
                limbs.pop();
            }
        }
        if out.is_empty() {
            out.push(b'0');
        }
        out.reverse();
        String::from_utf8(out).unwrap()
    }

    /// Exact ties between neighbouring `f64`s (and texts just either side of them), normal and
    /// subnormal, up to the largest: where rounding half to even decides.
    #[test]
    fn ties_and_their_neighbours() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut bits: Vec<u64> = (0..3_000).map(|_| rng.next_u64() & !(1 << 63)).collect();
        bits.extend([
            0,
            1,
            2,
            3,
            0x000f_ffff_ffff_ffff,
            0x0010_0000_0000_0000,
            0x7fef_ffff_ffff_ffff,
            0x7fef_ffff_ffff_fffe,
        ]);
        for b in bits {
            let exp = (b >> 52) as i64;
            if exp == 0x7ff {
                continue;
            }
            let frac = b & ((1 << 52) - 1);
            let (m, e) = if exp == 0 { (frac, -1074) } else { (frac | 1 << 52, exp - 1075) };
            // The midpoint between this f64 and the next one up: (2m + 1) × 2^(e - 1).
            let tie = exact(2 * m + 1, e - 1);
            check(&tie);
            let (mantissa, exponent) = tie.split_once('e').unwrap_or((&tie, "0"));
            let exponent: i64 = exponent.parse().unwrap();
            check(&format!("{mantissa}000001e{}", exponent - 6));
            // Its last non-zero digit one less, then 999999: just under the tie.
            let digits = mantissa.trim_end_matches('0');
            let shift = (mantissa.len() - digits.len()) as i64;
            let last = (digits.as_bytes()[digits.len() - 1] - 1) as char;
            check(&format!("{}{last}999999e{}", &digits[..digits.len() - 1], exponent + shift - 6));
            check(&exact(m, e));
        }
    }
}
