//! Prints `src/ffi/c_constants.rs` for `scripts/gen-header.sh`.
fn main() {
    print!("{}", sluice::c_enum::constants_source());
}
