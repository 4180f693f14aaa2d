//! Who may call the server from a web page: nobody, unless named. A browser sends any request a
//! page makes — a `text/plain` POST needs no CORS preflight — so without this check any page the
//! user visits could run served plans on a local server, and with DNS rebinding (a name of the
//! attacker's that resolves to 127.0.0.1) read the answers.
//!
//! - A request that carries `Origin` (browsers do; `curl`, SDKs and other programs do not) is
//!   refused unless its origin is one `--allowed-origins` names. No CORS headers are ever sent.
//! - On a loopback address the `Host` must be a loopback name or address (`localhost`,
//!   `127.x.x.x`, `[::1]`, with any port) or one `--allowed-hosts` names: a rebound name is
//!   refused. On another address (behind a proxy or a Kubernetes Service, where `Host` is a DNS
//!   name), `Host` is checked only against `--allowed-hosts`, when given.
//!
//! The check runs before every route, `/healthz` included.

use std::net::{IpAddr, SocketAddr};

/// The origins and hosts a server admits; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct OriginPolicy {
    /// The server listens on a loopback address.
    loopback: bool,
    /// Origins (`scheme://host[:port]`) whose pages may call the server.
    origins: Vec<String>,
    /// Host names (with or without a port) requests may be addressed to, besides loopback ones.
    hosts: Vec<String>,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Foreign {
    /// From a web page of an origin not allowed.
    Origin(String),
    /// Addressed to a host name the server does not answer to.
    Host(String),
}

impl Foreign {
    /// What the client reads.
    pub fn explain(&self) -> String {
        match self {
            Foreign::Origin(origin) => format!(
                "requests from web pages are refused: origin `{origin}` is not among the server's --allowed-origins"
            ),
            Foreign::Host(host) => format!(
                "host `{host}` is not a name this server answers to (a loopback name, or one of --allowed-hosts)"
            ),
        }
    }
}

impl OriginPolicy {
    /// The policy of a server bound to `addr`.
    pub fn new(addr: SocketAddr, origins: Vec<String>, hosts: Vec<String>) -> Self {
        OriginPolicy {
            loopback: addr.ip().is_loopback(),
            origins: origins
                .into_iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            hosts: hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether a request with these `Origin` and `Host` header values may go on.
    pub fn admit(&self, origin: Option<&str>, host: Option<&str>) -> Result<(), Foreign> {
        if let Some(origin) = origin {
            let normalised = origin.trim_end_matches('/').to_ascii_lowercase();
            if !self.origins.contains(&normalised) {
                return Err(Foreign::Origin(origin.to_string()));
            }
        }
        let host = host.unwrap_or_default().to_ascii_lowercase();
        let named = self.hosts.iter().any(|allowed| {
            *allowed == host || without_port(&host).is_some_and(|name| name == allowed)
        });
        let admitted = if self.loopback {
            named || is_loopback_host(&host)
        } else {
            self.hosts.is_empty() || named
        };
        if admitted {
            Ok(())
        } else {
            Err(Foreign::Host(host))
        }
    }
}

/// `name` of `name:port` (`[::1]` of `[::1]:8080`); None when there is no port.
fn without_port(host: &str) -> Option<&str> {
    let (name, port) = host.rsplit_once(':')?;
    let bracketed_or_plain = name.ends_with(']') || !name.contains(':');
    (bracketed_or_plain && port.chars().all(|c| c.is_ascii_digit())).then_some(name)
}

/// `localhost`, a 127.x.x.x address or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = without_port(host).unwrap_or(host);
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    let address = name.trim_start_matches('[').trim_end_matches(']');
    address.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(addr: &str, origins: &[&str], hosts: &[&str]) -> OriginPolicy {
        OriginPolicy::new(
            addr.parse().expect("an address"),
            origins.iter().map(|s| s.to_string()).collect(),
            hosts.iter().map(|s| s.to_string()).collect(),
        )
    }

    #[test]
    fn a_loopback_server_answers_loopback_hosts_and_programs_only() {
        let local = policy("127.0.0.1:8080", &[], &[]);
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "localhost",
            "[::1]:8080",
            "127.1.2.3",
        ] {
            assert_eq!(local.admit(None, Some(host)), Ok(()), "{host}");
        }
        for host in [
            "evil.example:8080",
            "127.0.0.1.evil.example",
            "",
            "[::2]:80",
        ] {
            assert_eq!(
                local.admit(None, Some(host)),
                Err(Foreign::Host(host.to_string())),
                "{host}"
            );
        }
        assert_eq!(
            local.admit(Some("https://evil.example"), Some("127.0.0.1:8080")),
            Err(Foreign::Origin("https://evil.example".into()))
        );
        assert_eq!(
            local.admit(Some("null"), Some("localhost")),
            Err(Foreign::Origin("null".into()))
        );
    }

    /// The near misses of an allowed origin are refused: a guard that matched by prefix,
    /// suffix or host name alone, ignored the scheme, port or userinfo, or took an IPv4-mapped
    /// address for the loopback one would admit one of these.
    #[test]
    fn near_misses_of_an_allowed_origin_are_refused() {
        let open = policy("127.0.0.1:8080", &["http://localhost:3000"], &[]);
        for allowed in [
            "http://localhost:3000",
            "HTTP://LocalHost:3000",
            "http://localhost:3000/",
        ] {
            assert_eq!(
                open.admit(Some(allowed), Some("localhost")),
                Ok(()),
                "{allowed}"
            );
        }
        for origin in [
            "http://localhost:3000.evil.example",
            "http://localhost:30000",
            "http://localhost:300",
            "http://localhost",
            "https://localhost:3000",
            "http://evil.localhost:3000",
            "http://user@localhost:3000",
            "http://localhost.:3000",
            "http://localhost:3000@evil.example",
            "http://127.0.0.1:3000",
            "http://[::1]:3000",
            "http://localhost:3000 ",
            "",
        ] {
            assert_eq!(
                open.admit(Some(origin), Some("localhost")),
                Err(Foreign::Origin(origin.to_string())),
                "{origin:?}"
            );
        }
    }

    /// The near misses of a loopback or named host are refused: prefixes and suffixes of the
    /// name, a name with a trailing dot or userinfo, a port that is not a number, and the
    /// IPv4-mapped or unspecified forms of an address.
    #[test]
    fn near_misses_of_an_allowed_host_are_refused() {
        let local = policy("127.0.0.1:8080", &[], &[]);
        for host in [
            "localhost.evil.example",
            "localhost.evil.example:8080",
            "evil-localhost",
            "127.0.0.1.nip.io",
            "127.0.0.1:80a",
            "localhost:8080:8080",
            "user@localhost",
            "[::ffff:127.0.0.1]:8080",
            "0.0.0.0:8080",
            "[::]:8080",
            "128.0.0.1",
        ] {
            assert_eq!(
                local.admit(None, Some(host)),
                Err(Foreign::Host(host.to_string())),
                "{host}"
            );
        }
        let pinned = policy("0.0.0.0:8080", &[], &["pagantic.svc"]);
        for host in [
            "pagantic.svc.evil.example",
            "evil.pagantic.svc",
            "pagantic.sv",
            "pagantic.svc.",
            "pagantic.svc:80a",
            "user@pagantic.svc",
            "",
        ] {
            assert_eq!(
                pinned.admit(None, Some(host)),
                Err(Foreign::Host(host.to_string())),
                "{host}"
            );
        }
        assert_eq!(pinned.admit(None, Some("PAGANTIC.SVC:8080")), Ok(()));
    }

    #[test]
    fn named_origins_and_hosts_are_admitted() {
        let open = policy(
            "127.0.0.1:8080",
            &["http://localhost:3000/"],
            &["pagantic.internal"],
        );
        assert_eq!(
            open.admit(Some("http://LOCALHOST:3000"), Some("localhost:8080")),
            Ok(())
        );
        assert_eq!(open.admit(None, Some("pagantic.internal:8080")), Ok(()));
        let served = policy("0.0.0.0:8080", &[], &[]);
        assert_eq!(
            served.admit(None, Some("pagantic.svc.cluster.local")),
            Ok(())
        );
        let pinned = policy("0.0.0.0:8080", &[], &["pagantic.svc"]);
        assert_eq!(pinned.admit(None, Some("pagantic.svc:8080")), Ok(()));
        assert_eq!(
            pinned.admit(None, Some("other.svc")),
            Err(Foreign::Host("other.svc".into()))
        );
    }
}
