//! Prints the `#define`s of the enums C sees, for `scripts/gen-header.sh`.
fn main() {
    print!("{}", sluice::c_enum::header_constants());
}
