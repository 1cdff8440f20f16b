//! Who is calling: the principal a bearer token resolves to.

use std::fmt;
use std::str::FromStr;

use crate::Kind;

/// The identity behind a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Principal {
    Worker(Kind),
    Conn,
    Shipkeeper,
    Operator,
}

impl Principal {
    pub fn worker_kind(self) -> Option<Kind> {
        match self {
            Principal::Worker(k) => Some(k),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown principal {0:?}")]
pub struct UnknownPrincipal(pub String);

impl FromStr for Principal {
    type Err = UnknownPrincipal;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "conn" => Ok(Principal::Conn),
            "shipkeeper" => Ok(Principal::Shipkeeper),
            "operator" => Ok(Principal::Operator),
            _ => s
                .strip_prefix("worker:")
                .and_then(|k| k.parse().ok())
                .map(Principal::Worker)
                .ok_or_else(|| UnknownPrincipal(s.to_owned())),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Worker(k) => write!(f, "worker:{k}"),
            Principal::Conn => f.write_str("conn"),
            Principal::Shipkeeper => f.write_str("shipkeeper"),
            Principal::Operator => f.write_str("operator"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_principals_carry_their_kind() {
        assert_eq!(
            "worker:sextant".parse::<Principal>(),
            Ok(Principal::Worker(Kind::Sextant))
        );
        assert_eq!(
            Principal::Worker(Kind::Sextant).to_string(),
            "worker:sextant"
        );
    }

    #[test]
    fn a_worker_of_an_unknown_kind_is_no_principal() {
        assert!("worker:plainforge".parse::<Principal>().is_err());
        assert!("worker:".parse::<Principal>().is_err());
    }

    #[test]
    fn service_principals_round_trip() {
        for p in [Principal::Conn, Principal::Shipkeeper, Principal::Operator] {
            assert_eq!(p.to_string().parse::<Principal>(), Ok(p));
        }
    }
}
