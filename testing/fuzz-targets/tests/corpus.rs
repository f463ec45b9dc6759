//! Every file of the seed corpus (`testing/fuzz/corpus/<target>/`) through its
//! target: the valid inputs the fuzzer starts from, and every input it
//! ever found failing, which is put there when it is fixed.

use std::path::Path;

use spillway_fuzz_targets::TARGETS;

#[test]
fn every_corpus_file_passes_its_target() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for (name, target) in TARGETS {
        let dir = corpus.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a corpus entry").path())
            .collect();
        files.sort();
        assert!(
            files.len() >= 3,
            "{}: a handful of seeds, please",
            dir.display()
        );
        for file in files {
            let data = std::fs::read(&file).expect("a corpus file");
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} fails", file.display());
        }
    }
}
