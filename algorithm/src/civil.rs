//! Civil dates (proleptic Gregorian, as PostgreSQL's): days since
//! 2000-01-01 and (year, month, day), both ways, for calendar windows'
//! local-time arithmetic ([`crate::calendar_window`]; the extension's
//! `src/calendar.rs`). Years are astronomical (1 BC is year 0).

/// Days since 2000-01-01 of the first day of `month` in `year` (proleptic
/// Gregorian; Howard Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i64, month: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // Days since 1970-01-01, less the 10,957 days to 2000-01-01.
    era * 146_097 + doe - 719_468 - 10_957
}

/// (year, month, day) of the day `days` since 2000-01-01 (Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 10_957 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip() {
        for days in [-800_000, -1, 0, 59, 60, 365, 9_527, 100_000] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month) + day - 1, days);
        }
        assert_eq!(civil_from_days(0), (2000, 1, 1));
        assert_eq!(civil_from_days(59), (2000, 2, 29));
    }
}
