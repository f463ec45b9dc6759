//! The configuration file, `[sink]` table included: any text is either a
//! configuration or an error that says what is wrong, and the meaning of
//! an accepted file does not depend on how its TOML is written.

use spillway::config::{Config, ConfigError};
use spillway_sinks::SinkConfig;

/// Input: the file's text (bytes that are not UTF-8 are replaced, as a
/// file read with them would be refused before parsing).
///
/// Checks: `Config::parse` gives the same answer twice; an error names
/// something (never an empty message), a range error its key; an accepted
/// file validates again, its `[sink]` table made again from its parts
/// (`SinkConfig::new`) is the same and valid, its drain's backoff starts
/// no later than its cap, and the same document written out again by the
/// TOML library (other layout, quoting, key order) parses to the same
/// configuration; the `[sink]` table alone parses to the same `SinkConfig`.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let parsed = Config::parse(&text, "fuzz");
    let again = Config::parse(&text, "fuzz");
    match (&parsed, &again) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "parsed differently twice"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "failed differently twice"),
        _ => panic!("parsed once and failed once: {parsed:?} / {again:?}"),
    }
    let cfg = match parsed {
        Ok(cfg) => cfg,
        Err(e) => return check_error(&e),
    };
    cfg.validate()
        .expect("an accepted configuration validates again");
    assert!(
        !cfg.sinks.is_empty(),
        "an accepted configuration has a sink"
    );
    for sink in cfg.sinks.values() {
        sink.validate().expect("an accepted sink table validates");
        let remade = SinkConfig::new(sink.type_config().clone(), sink.delivery().clone());
        remade
            .validate()
            .expect("the sink table made from its parts validates");
        assert_eq!(&remade, sink, "the sink table made from its parts differs");
        let drain = sink.delivery();
        assert!(drain.retry_initial() <= drain.retry_max(), "{drain:?}");
    }

    // The document as the TOML library writes it back: same values, other text.
    let value: toml::Table = toml::from_str(&text).expect("accepted text is a TOML table");
    if let Ok(rewritten) = toml::to_string(&value) {
        let reparsed = Config::parse(&rewritten, "fuzz, rewritten")
            .unwrap_or_else(|e| panic!("rewritten text refused: {e}\n{rewritten}"));
        assert_eq!(reparsed, cfg, "the rewritten text means something else");
    }
    if let Some(sink) = value.get("sink") {
        let alone: SinkConfig = sink
            .clone()
            .try_into()
            .unwrap_or_else(|e| panic!("the [sink] table alone is refused: {e}"));
        assert_eq!(
            Some(&alone),
            cfg.sinks.get(spillway::config::DEFAULT_SINK),
            "the [sink] table alone means something else"
        );
    }
}

fn check_error(e: &ConfigError) {
    let message = e.to_string();
    assert!(!message.trim().is_empty(), "an empty error: {e:?}");
    if let ConfigError::Range { key, .. } | ConfigError::Invalid { key, .. } = e {
        assert!(message.contains(key), "{message:?} does not name {key}");
    }
}
