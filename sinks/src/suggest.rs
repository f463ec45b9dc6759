//! "Did you mean ...?": the known word closest to a misspelt one, for
//! messages that refuse a key or a value.

/// The word of `known` closest to `given` (Damerau-Levenshtein: a swapped
/// pair of letters counts once), if it is close enough to be what was
/// meant: at most one edit for a word of up to four letters, two up to
/// eight, three beyond; ties go to the first in `known`.
pub fn closest<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let budget = match given.chars().count() {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(given, k), *k))
        .filter(|(d, _)| *d <= budget)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn a_near_miss_finds_its_word_and_a_stranger_none() {
        let known = ["path", "fsync", "rotate_bytes", "format"];
        assert_eq!(closest("fsinc", &known), Some("fsync"));
        assert_eq!(closest("rotate_byte", &known), Some("rotate_bytes"));
        assert_eq!(closest("rotaet_bytes", &known), Some("rotate_bytes"));
        assert_eq!(closest("paht", &known), Some("path"));
        assert_eq!(closest("zzz", &known), None);
        assert_eq!(closest("colour", &known), None);
        assert_eq!(closest("jsn", &["ndjson", "json"]), Some("json"));
    }
}
