//! MicroTime values for `renewTime` and `acquireTime`.
//!
//! These are for people and other tools reading the Lease: leasehold never
//! judges expiry by them (the holder's wall clock is not trusted, see the
//! README). They only have to change on every renewal, so that a renewal is
//! never a no-op write that keeps the resourceVersion.

pub(crate) use leasehold_core::unique_wall_micros as unique_micros;

/// `2006-01-02T15:04:05.000000Z`: RFC 3339 with exactly six fractional
/// digits, as the API server's MicroTime wants.
pub(crate) fn micro_time(micros: u64) -> String {
    let secs = micros / 1_000_000;
    let frac = micros % 1_000_000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_micro_time() {
        assert_eq!(micro_time(0), "1970-01-01T00:00:00.000000Z");
        // 2024-02-29T23:59:59.000001Z
        assert_eq!(
            micro_time(1_709_251_199_000_001),
            "2024-02-29T23:59:59.000001Z"
        );
        assert_eq!(
            micro_time(951_782_400_500_000),
            "2000-02-29T00:00:00.500000Z"
        );
    }

    #[test]
    fn unique_micros_grow() {
        let a = unique_micros();
        let b = unique_micros();
        assert!(b > a);
    }
}
