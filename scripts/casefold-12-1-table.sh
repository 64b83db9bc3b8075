#!/bin/sh
# Prints crates/e4-format/src/casefold_12_1.rs: the code points Unicode 12.1 had not
# assigned that the casefold crates' newer tables fold, decompose or class. Perl's
# Unicode::UCD (any Perl with Unicode 12.1 or later) gives what 12.1 assigned; the
# example casefold_12_1_table gives what the crates touch. Run again after a version
# bump of caseless or unicode-normalization (e4-format's casefold tests fail until then).
set -eu
perl -MUnicode::UCD=prop_invlist -e 'print "$_\n" for prop_invlist("Present_In=12.1")' |
    cargo run -q -p e4-format --example casefold_12_1_table
