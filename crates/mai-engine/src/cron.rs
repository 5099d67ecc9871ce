//! Cron arithmetic: whether an expression is valid and when it fires next, in a time zone; and
//! which zone the system runs in. A leaf: pure time computation, with one helper that moves the
//! (possibly slow) search off the async workers.
//!
//! Accepted: five fields — minute hour day-of-month month day-of-week — with `*`, lists, ranges,
//! steps, names (`MON`, `JAN`) and croner's `L`, `W`, `#`; or a nickname (`@hourly`, `@daily`,
//! `@weekly`, `@monthly`, `@yearly`). No seconds field and no year field: a task fires at most
//! once a minute, on whole minutes.

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

/// What the error says is accepted (the engine's invalid-cron error repeats it).
pub(crate) const ACCEPTED: &str = "expected 5 fields: minute hour day month weekday, e.g. \
`0 18 * * *`, or @hourly/@daily/@weekly/@monthly/@yearly";

/// The next fire time of a cron expression strictly after `after`, the expression read in
/// `zone`. Always on a whole second (a whole minute), whatever fraction `after` has.
///
/// At a DST fall-back the repeated local hour fires once (its first occurrence), and a time in
/// a spring-forward gap fires at the first valid time after the gap (croner's rules); a search
/// that lands on or before `after` (a run ending in the repeated hour) searches on from there.
///
/// An expression that parses but never matches a date (`0 0 31 2 *`) makes croner walk day by day
/// to its year limit (5000): ~30-150 ms of CPU in a release build, ten times that in a debug one
/// (found while fuzzing). Callers on the async runtime use [`next_fire_blocking`];
/// the error then says what is wrong instead of croner's "time search limit exceeded".
pub(crate) fn next_fire(
    expr: &str,
    zone: Tz,
    after: DateTime<Utc>,
) -> Result<DateTime<Utc>, String> {
    let fields = expr.split_whitespace().count();
    if fields != 5 && !expr.trim_start().starts_with('@') {
        return Err(format!("it has {fields} field(s)"));
    }
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| e.to_string())?;
    let whole = after.with_nanosecond(0).unwrap_or(after);
    let mut from = whole.with_timezone(&zone);
    loop {
        let next = cron
            .find_next_occurrence(&from, false)
            .map_err(|e| match e {
                croner::errors::CronError::TimeSearchLimitExceeded => {
                    "it never fires: no date matches it (e.g. day 31 in a month that has 30 days)"
                        .to_owned()
                }
                other => other.to_string(),
            })?;
        let next_utc = next.with_timezone(&Utc);
        if next_utc > whole {
            return Ok(next_utc.with_nanosecond(0).unwrap_or(next_utc));
        }
        from = next;
    }
}

/// [`next_fire`] on the blocking pool, so a slow search never stalls the async workers.
pub(crate) async fn next_fire_blocking(
    expr: &str,
    zone: Tz,
    after: DateTime<Utc>,
) -> Result<DateTime<Utc>, String> {
    let expr = expr.to_owned();
    tokio::task::spawn_blocking(move || next_fire(&expr, zone, after))
        .await
        .map_err(|e| format!("the cron search did not finish: {e}"))?
}

/// The system's time zone and where it came from: `TZ` if it holds an IANA name, else the
/// zone `/etc/localtime` names; UTC when neither is an IANA name.
pub fn system_time_zone() -> (Tz, &'static str) {
    let from_env = std::env::var("TZ")
        .ok()
        .and_then(|tz| mai_core::time_zone::parse_time_zone(tz.trim_start_matches(':')).ok());
    if let Some(zone) = from_env {
        return (zone, "the system's, from TZ");
    }
    match iana_time_zone::get_timezone()
        .ok()
        .and_then(|name| mai_core::time_zone::parse_time_zone(&name).ok())
    {
        Some(zone) => (zone, "the system's"),
        None => (
            Tz::UTC,
            "the system's zone has no IANA name; set [task] timezone",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cron_expression_that_never_fires_is_refused_with_a_clear_reason() {
        // The last two were found by the `cron` fuzz target: an empty list and an empty
        // AND-mode weekday parse, and never fire.
        for expr in [
            "0 0 31 2 *",
            "0 0 30 2 *",
            "0 0 31 4,6,9,11 *",
            "0 09 , 12 *",
            "9 2    5  1 +",
        ] {
            let error = next_fire(expr, Tz::UTC, Utc::now()).unwrap_err();
            assert!(error.contains("it never fires"), "{expr}: {error}");
        }
        let now = Utc::now();
        assert!(next_fire("0 0 29 2 *", Tz::UTC, now).unwrap() > now);
    }

    #[tokio::test]
    async fn the_blocking_search_gives_the_same_answer() {
        let now = Utc::now();
        assert_eq!(
            next_fire_blocking("*/5 * * * *", Tz::UTC, now).await,
            next_fire("*/5 * * * *", Tz::UTC, now)
        );
        assert!(
            next_fire_blocking("0 0 31 2 *", Tz::UTC, now)
                .await
                .is_err()
        );
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn six_pm_in_shanghai_fires_at_ten_utc_on_whole_seconds() {
        let after = at("2025-03-01T08:15:42.123456789Z");
        let next = next_fire("0 18 * * *", Tz::Asia__Shanghai, after).unwrap();
        assert_eq!(next, at("2025-03-01T10:00:00Z"));
        let next = next_fire("0 18 * * *", Tz::Asia__Shanghai, next).unwrap();
        assert_eq!(next, at("2025-03-02T10:00:00Z"));
        let next = next_fire("*/5 * * * *", Tz::UTC, after).unwrap();
        assert_eq!(next, at("2025-03-01T08:20:00Z"));
    }

    #[test]
    fn the_repeated_hour_of_a_dst_fall_back_fires_once() {
        // Berlin leaves summer time on 2024-10-27: 02:00-03:00 local happens twice.
        let zone = Tz::Europe__Berlin;
        let first = next_fire("30 2 * * *", zone, at("2024-10-26T23:00:00Z")).unwrap();
        assert_eq!(first, at("2024-10-27T00:30:00Z"), "02:30 summer time");
        let second = next_fire("30 2 * * *", zone, first).unwrap();
        assert_eq!(second, at("2024-10-28T01:30:00Z"), "02:30 the next day");
        // A run that ends inside the repeated hour, after its own fire time: never the past.
        let late = at("2024-10-27T01:20:00Z");
        assert_eq!(next_fire("30 2 * * *", zone, late).unwrap(), second);
    }

    #[test]
    fn a_time_in_a_dst_gap_fires_right_after_the_gap() {
        // Berlin skips 02:00-03:00 on 2024-03-31: 02:30 does not exist that day.
        let next = next_fire("30 2 * * *", Tz::Europe__Berlin, at("2024-03-30T23:00:00Z")).unwrap();
        assert_eq!(next, at("2024-03-31T01:00:00Z"), "03:00 summer time");
    }

    #[test]
    fn only_five_fields_or_a_nickname_are_accepted() {
        let after = at("2025-03-01T08:15:00Z");
        for expr in ["*/10 * * * * *", "0 0 18 * * * 2030", "0 18 * *"] {
            let error = next_fire(expr, Tz::UTC, after).unwrap_err();
            assert!(error.contains("field(s)"), "{expr}: {error}");
        }
        assert_eq!(
            next_fire("@daily", Tz::Asia__Shanghai, after).unwrap(),
            at("2025-03-01T16:00:00Z")
        );
    }
}
