//! IANA time zone names (`Asia/Shanghai`, `UTC`): the one place that turns a name from the config
//! (`[task] timezone`) or from a task's creator into a zone, with an error that says what to type
//! instead. Finding the system's zone reads the machine and so lives with the engine, not here.

pub use chrono_tz::Tz;

/// The zone named `name` (an IANA name, case-insensitive), or an error naming the closest known
/// names.
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    let trimmed = name.trim();
    if let Ok(zone) = trimmed.parse::<Tz>() {
        return Ok(zone);
    }
    if let Some(zone) = chrono_tz::TZ_VARIANTS
        .iter()
        .find(|zone| zone.name().eq_ignore_ascii_case(trimmed))
    {
        return Ok(*zone);
    }
    let mut near: Vec<(f64, &str)> = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|zone| (strsim::jaro_winkler(trimmed, zone.name()), zone.name()))
        .filter(|(score, _)| *score > 0.8)
        .collect();
    near.sort_by(|a, b| b.0.total_cmp(&a.0));
    let hint = match near.first() {
        Some((_, best)) => format!("did you mean `{best}`?"),
        None => "e.g. `Asia/Shanghai`, `Europe/Berlin`, `UTC`".to_owned(),
    };
    Err(format!("`{trimmed}` is not an IANA time zone name; {hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_iana_name_parses_in_any_case() {
        assert_eq!(parse_time_zone("Asia/Shanghai"), Ok(Tz::Asia__Shanghai));
        assert_eq!(parse_time_zone("asia/shanghai"), Ok(Tz::Asia__Shanghai));
        assert_eq!(parse_time_zone(" UTC "), Ok(Tz::UTC));
    }

    #[test]
    fn a_misspelled_name_is_refused_with_the_closest_name() {
        let error = parse_time_zone("Asia/Shangai").unwrap_err();
        assert!(
            error.contains("`Asia/Shangai` is not an IANA time zone name"),
            "{error}"
        );
        assert!(error.contains("did you mean `Asia/Shanghai`?"), "{error}");
        let error = parse_time_zone("+08:00").unwrap_err();
        assert!(error.contains("e.g. `Asia/Shanghai`"), "{error}");
    }

    #[test]
    fn a_wrong_task_timezone_in_the_config_names_the_key() {
        let error = crate::config::Config::parse("[task]\ntimezone = \"Asia/Shangai\"", [])
            .unwrap_err()
            .to_string();
        assert!(error.contains("[task].timezone"), "{error}");
        assert!(error.contains("did you mean `Asia/Shanghai`?"), "{error}");
        let config =
            crate::config::Config::parse("[task]\ntimezone = \"Asia/Shanghai\"", []).unwrap();
        assert_eq!(config.task.timezone.as_deref(), Some("Asia/Shanghai"));
    }
}
