//! e4-fs's folders are layers (docs/ARCHITECTURE.md, "Inside e4-fs"): no import from a
//! lower layer to a higher one or between two folders of one layer, and no circle of files
//! importing each other (e4-testkit's `layering_problems` reads the sources).

use std::path::Path;

/// The layer of each top-level module, lowest first. Folders of one layer may not import
/// each other.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("time", 0),
    ("io", 1),
    ("buffer", 2),
    ("map", 3),
    ("xattr", 3),
    ("dir", 4),
    ("space", 5),
    ("journal", 5),
    ("inode", 6),
    ("names", 6),
    ("txn", 7),
    ("filesystem", 8),
    ("ops", 9),
    ("lib", 10),
];

#[test]
fn the_layers_hold() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = e4_testkit::layering_problems(&src, LAYERS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
