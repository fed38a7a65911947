//! Order statistics over samples.

/// Summary of a sample set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Smallest sample.
    pub min: f64,
    /// Median (mean of the two middle samples when `n` is even).
    pub median: f64,
    /// 90th percentile (nearest rank).
    pub p90: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// Summary of `samples` (any order); `None` when empty or with a NaN.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        // Nearest rank: ceil(0.9 n), 1-based.
        let p90 = s[(n * 9).div_ceil(10).max(1) - 1];
        Some(Summary {
            n,
            min: s[0],
            median,
            p90,
            max: s[n - 1],
        })
    }
}

/// The first and third quartiles of `samples` (any order), interpolated
/// between the nearest ranks; `None` when empty or with a NaN.
pub fn quartiles(samples: &[f64]) -> Option<(f64, f64)> {
    if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let pos = p * (s.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
    };
    Some((at(0.25), at(0.75)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate_between_ranks() {
        assert_eq!(quartiles(&[]), None);
        assert_eq!(quartiles(&[2.0]), Some((2.0, 2.0)));
        assert_eq!(quartiles(&[5.0, 1.0, 3.0, 2.0, 4.0]), Some((2.0, 4.0)));
        assert_eq!(quartiles(&[4.0, 1.0, 3.0, 2.0]), Some((1.75, 3.25)));
    }

    #[test]
    fn odd_even_and_edges() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(Summary::of(&ten).unwrap().p90, 9.0);
        assert_eq!(Summary::of(&[7.0]).unwrap().p90, 7.0);
    }
}
