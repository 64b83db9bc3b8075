//! e4-fsck's folders are layers (docs/FSCK.md, "Layout"): no import from a lower layer to a
//! higher one or between two folders of one layer, and no circle of files importing each
//! other (e4-testkit's `layering_problems` reads the sources).

use std::path::Path;

/// The layer of each top-level module, lowest first. Folders of one layer may not import
/// each other.
const LAYERS: &[(&str, u32)] = &[
    ("report", 0),
    ("state", 1),
    ("walk", 2),
    ("xattr", 2),
    ("pass0", 3),
    ("pass1", 3),
    ("pass2", 3),
    ("pass3", 3),
    ("pass4", 3),
    ("pass5", 3),
    ("quota", 3),
    ("lib", 4),
];

#[test]
fn the_layers_hold() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = e4_testkit::layering_problems(&src, LAYERS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
