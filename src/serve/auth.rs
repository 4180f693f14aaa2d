//! The bearer token: `Authorization: Bearer <token>` compared in constant time. Both sides are
//! hashed first (SHA-256), so the comparison takes the same time whatever the token's length and
//! wherever the first differing byte is.

use sha2::{Digest, Sha256};

/// The token a server expects, kept as its hash.
pub struct Token([u8; 32]);

impl Token {
    pub fn new(token: &str) -> Self {
        Token(Sha256::digest(token.as_bytes()).into())
    }

    /// Whether an `Authorization` header value carries this token.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let given = authorization
            .and_then(|value| value.strip_prefix(b"Bearer "))
            .unwrap_or_default();
        let given: [u8; 32] = Sha256::digest(given).into();
        let difference = given
            .iter()
            .zip(self.0)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        authorization.is_some() && difference == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = Token::new("s3cret");
        assert!(token.admits(Some(b"Bearer s3cret")));
        for wrong in [
            &b"Bearer s3cre"[..],
            b"Bearer s3cret ",
            b"bearer s3cret",
            b"s3cret",
            b"Bearer ",
        ] {
            assert!(
                !token.admits(Some(wrong)),
                "{}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(!token.admits(None));
    }
}
