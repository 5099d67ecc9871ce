//! The SSRF guard of `fetch`: which addresses and host names are internal, and the resolver
//! seam through which every name is resolved exactly once.
//!
//! Owns the address classes. Must not connect anywhere; `fetch` connects only to an address this
//! module has passed.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use async_trait::async_trait;

/// Resolves a host name to addresses. Tests substitute a map of chosen answers.
#[async_trait]
pub trait Resolver: Send + Sync + 'static {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The system resolver (getaddrinfo through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// Why `name` is refused before any resolution: `localhost` and its subdomains resolve to
/// loopback on most systems whatever DNS says.
pub fn refused_name(name: &str) -> Option<&'static str> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (name == "localhost"
        || name.ends_with(".localhost")
        || name == "localhost.localdomain"
        || name == "ip6-localhost"
        || name == "ip6-loopback")
        .then_some("a localhost name")
}

/// Why `ip` is internal (and so refused), or `None` for a public address.
pub fn refused_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if a == 0 {
        Some("0.0.0.0/8 (this network)")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private network")
    } else if ip.is_link_local() {
        Some("link-local (incl. cloud metadata 169.254.169.254)")
    } else if a == 100 && (64..128).contains(&b) {
        Some("carrier-grade NAT 100.64.0.0/10")
    } else if ip.is_broadcast() {
        Some("broadcast")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if a >= 240 {
        Some("reserved 240.0.0.0/4")
    } else if a == 192 && b == 0 && c == 0 {
        Some("IETF protocol assignments 192.0.0.0/24")
    } else if a == 198 && (b == 18 || b == 19) {
        Some("benchmarking 198.18.0.0/15")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    if ip.is_loopback() {
        Some("IPv6 loopback")
    } else if ip.is_unspecified() {
        Some("IPv6 unspecified")
    } else if ip.is_multicast() {
        Some("IPv6 multicast")
    } else if segments[0] & 0xfe00 == 0xfc00 {
        Some("IPv6 unique-local fc00::/7")
    } else if segments[0] & 0xffc0 == 0xfe80 {
        Some("IPv6 link-local fe80::/10")
    } else if segments[0] & 0xffc0 == 0xfec0 {
        Some("IPv6 site-local fec0::/10")
    } else if segments[..5] == [0; 5] && segments[5] == 0xffff {
        // Refused whatever the embedded IPv4 is: connecting to it reaches that IPv4 address,
        // and a public one has no reason to be written this way.
        Some("IPv4-mapped IPv6 ::ffff:0:0/96")
    } else if segments[..6] == [0; 6] {
        Some("IPv4-compatible IPv6 ::/96")
    } else if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some("NAT64 64:ff9b::/96 (reaches an embedded IPv4 address)")
    } else if segments[0] == 0x2002 {
        Some("6to4 2002::/16 (reaches an embedded IPv4 address)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> bool {
        refused_address(s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))).is_some()
    }

    #[test]
    fn internal_addresses_are_refused() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
        ] {
            assert!(refused(ip), "{ip} must be refused");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700:4700::1111",
        ] {
            assert!(!refused(ip), "{ip} is public");
        }
    }

    #[test]
    fn localhost_names_are_refused() {
        for name in ["localhost", "LOCALHOST.", "api.localhost", "ip6-localhost"] {
            assert!(refused_name(name).is_some(), "{name}");
        }
        assert!(refused_name("example.com").is_none());
        assert!(refused_name("localhost.example.com").is_none());
    }
}
