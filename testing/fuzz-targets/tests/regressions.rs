//! Inputs the fuzzers found failing, each a test of its own (they are in
//! `testing/fuzz/corpus/` too, so every fuzz run starts from them). Named for what
//! they found; the fix, or the reason the target changed, is in the
//! test's comment and in testing/fuzz/README.md ("Findings").

use std::path::Path;

fn corpus_file(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A valid checkpoint slot at generation u64::MAX: the next write
/// overflowed (and, wrapped to 0, every later write lost to it, so the
/// checkpoint never moved again). Fixed in wab/src/checkpoint.rs: the file
/// starts again at generation 1 (its own unit test:
/// `a_slot_at_the_last_generation_does_not_stop_the_checkpoint`).
#[test]
fn checkpoint_at_the_last_generation() {
    spillway_fuzz_targets::checkpoint(&corpus_file("checkpoint", "crash-last-generation"));
}

/// A BadMagic nack with a second payload byte (`[0x01, 0x03]`): the client's
/// decoder accepts it, though the spec gives every reason but
/// VersionMismatch a 1-byte payload, so it did not re-encode to the same
/// bytes. The client's leniency is reported, not changed (a stricter
/// client could refuse what other weir daemons send); the target now
/// expects the re-encoding to match only for spec-shaped nacks.
#[test]
fn nack_of_two_bytes_for_bad_magic() {
    let input = corpus_file("frame_decoder", "crash-nack-of-2-bytes-for-bad-magic");
    spillway_fuzz_targets::frame_decoder(&input);
    let mut frame = spillway_protocol::BytesMut::new();
    spillway_protocol::encode_frame(3, 1, 0, &[0x01, 0x03], &mut frame);
    assert_eq!(
        spillway_protocol::decode_response(&mut frame),
        Ok(Some(spillway_protocol::Response::Nack(
            spillway_protocol::NackReason::BadMagic
        ))),
        "the leniency this test documents is gone: update testing/fuzz/README.md"
    );
}

/// A sealed segment whose first record header is damaged and whose last
/// 40 bytes pass for a footer 3 bytes past where the walk stops: salvage
/// planned a segment it could not write (no GAP frame fits in 3 bytes), and
/// its read-back check failed the whole recovery, so the shard could not
/// start. Fixed in wab/src/salvage.rs: such a segment cannot be salvaged
/// and is quarantined whole, like any other.
#[test]
fn sealed_segment_with_a_short_gap_before_its_footer() {
    spillway_fuzz_targets::segment(&corpus_file("segment", "crash-short-gap-before-footer"));
}

/// A sealed segment whose header is damaged past repair, with one intact
/// record after it: recovery quarantines it and presumes its record's
/// number past the clock's floor, which it writes into the quarantined
/// name. A start trusting footers ran a moment after the full recovery
/// and named it with a later clock, and the target compared the names
/// byte for byte (CI failed on it). Nothing was wrong in recovery; the
/// target now compares such names without the clock (`without_clock`).
#[test]
fn presumed_numbers_named_by_the_clock() {
    spillway_fuzz_targets::segment(&corpus_file(
        "segment",
        "crash-presumed-numbers-named-by-the-clock",
    ));
}
