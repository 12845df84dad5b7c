//! `sha256:<hex>` digests of what rein pins and compares: a tool
//! definition an MCP server listed, a run's contract.

use sha2::{Digest as _, Sha256};

/// `sha256:` and the 64 lowercase hex digits of the SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    #[test]
    fn the_empty_input_has_the_known_digest() {
        assert_eq!(
            super::sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
