//! The ARP cache (RFC 826) with timeouts, and the packets waiting on it.

use crate::time::{Duration, Instant};
use crate::wire::ethernet::MacAddr;
use crate::KeyedState;
use std::collections::HashMap;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NState {
    /// Asked, no answer yet.
    Incomplete,
    /// Answered within the timeout.
    Reachable,
    /// Older than the timeout: still used while a refresh request is out,
    /// forgotten after a second timeout.
    Stale,
}

#[derive(Debug, Clone, Copy)]
struct Neighbor {
    mac: MacAddr,
    state: NState,
    updated: Instant,
    tries: u8,
    next_try: Instant,
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Use this address.
    Hit(MacAddr),
    /// Use this address, and send a refresh request for it.
    HitRefresh(MacAddr),
    /// Unknown: send a request (first miss) and wait.
    MissRequest,
    /// A request is already out: wait.
    Pending,
}

/// IPv4 → MAC cache.
#[derive(Debug)]
pub(crate) struct ArpCache {
    map: HashMap<Ipv4Addr, Neighbor, KeyedState>,
    timeout: Duration,
    retry: Duration,
    retries: u8,
    capacity: usize,
    /// Earliest `next_try` of an incomplete entry.
    deadline: Instant,
    /// Unresolved entries evicted to make room: their waiters must be told.
    evicted: Vec<Ipv4Addr>,
}

impl ArpCache {
    pub fn new(
        hasher: KeyedState,
        timeout: Duration,
        retry: Duration,
        retries: u8,
        capacity: usize,
    ) -> ArpCache {
        ArpCache {
            map: HashMap::with_hasher(hasher),
            timeout,
            retry,
            retries,
            capacity: capacity.max(1),
            deadline: Instant::NEVER,
            evicted: Vec::new(),
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Find the MAC for `ip`, creating an incomplete entry on a miss.
    pub fn lookup(&mut self, ip: Ipv4Addr, now: Instant) -> Lookup {
        if let Some(n) = self.map.get_mut(&ip) {
            match n.state {
                NState::Incomplete => return Lookup::Pending,
                NState::Reachable if now < n.updated + self.timeout => return Lookup::Hit(n.mac),
                NState::Reachable => {
                    n.state = NState::Stale;
                    return Lookup::HitRefresh(n.mac);
                }
                NState::Stale if now < n.updated + 2 * self.timeout => return Lookup::Hit(n.mac),
                NState::Stale => {
                    self.map.remove(&ip);
                }
            }
        }
        self.make_room(now);
        let next_try = now + self.retry;
        self.map.insert(
            ip,
            Neighbor {
                mac: MacAddr::UNSPECIFIED,
                state: NState::Incomplete,
                updated: now,
                tries: 1,
                next_try,
            },
        );
        self.deadline = self.deadline.min(next_try);
        Lookup::MissRequest
    }

    /// Evict when full (a linear scan, only then): stale entries first,
    /// then unanswered ones, then the least recently confirmed — so a
    /// flood of unanswered lookups cannot push out the gateway.
    fn make_room(&mut self, _now: Instant) {
        if self.map.len() < self.capacity {
            return;
        }
        let rank = |s: NState| match s {
            NState::Stale => 0,
            NState::Incomplete => 1,
            NState::Reachable => 2,
        };
        let victim = self
            .map
            .iter()
            .min_by_key(|(ip, n)| (rank(n.state), n.updated, u32::from(**ip)))
            .map(|(ip, n)| (*ip, n.state));
        if let Some((v, state)) = victim {
            self.map.remove(&v);
            if state == NState::Incomplete {
                self.evicted.push(v);
            }
        }
    }

    /// Addresses evicted while unresolved since the last call.
    pub fn take_evicted(&mut self) -> Vec<Ipv4Addr> {
        std::mem::take(&mut self.evicted)
    }

    /// RFC 826 merge: update an entry we have. Returns true if one existed.
    pub fn update(&mut self, ip: Ipv4Addr, mac: MacAddr, now: Instant) -> bool {
        match self.map.get_mut(&ip) {
            Some(n) => {
                n.mac = mac;
                n.state = NState::Reachable;
                n.updated = now;
                true
            }
            None => false,
        }
    }

    /// Add or refresh an entry (the request was for us).
    pub fn insert(&mut self, ip: Ipv4Addr, mac: MacAddr, now: Instant) {
        if !self.update(ip, mac, now) {
            self.make_room(now);
            self.map.insert(
                ip,
                Neighbor {
                    mac,
                    state: NState::Reachable,
                    updated: now,
                    tries: 0,
                    next_try: Instant::NEVER,
                },
            );
        }
    }

    /// Retry or give up on incomplete entries whose time has come: returns
    /// the addresses to ask again and those given up on.
    pub fn on_timeout(
        &mut self,
        now: Instant,
        ask: &mut Vec<Ipv4Addr>,
        failed: &mut Vec<Ipv4Addr>,
    ) {
        if now < self.deadline {
            return;
        }
        let mut next = Instant::NEVER;
        for (ip, n) in self.map.iter_mut() {
            if n.state != NState::Incomplete {
                continue;
            }
            if n.next_try <= now {
                if n.tries >= self.retries {
                    failed.push(*ip);
                    continue;
                }
                n.tries += 1;
                n.next_try = now + self.retry;
                ask.push(*ip);
            }
            next = next.min(n.next_try);
        }
        for ip in failed.iter() {
            self.map.remove(ip);
        }
        // Deterministic order whatever the hash layout.
        ask.sort_unstable();
        failed.sort_unstable();
        self.deadline = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> ArpCache {
        ArpCache::new(
            KeyedState::new([1; 16]),
            Duration::from_secs(60),
            Duration::from_secs(1),
            3,
            2,
        )
    }

    const IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);
    const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);

    #[test]
    fn miss_then_hit_then_stale_then_gone() {
        let mut c = cache();
        let t0 = Instant::ZERO;
        assert_eq!(c.lookup(IP, t0), Lookup::MissRequest);
        assert_eq!(c.lookup(IP, t0), Lookup::Pending);
        assert!(c.update(IP, MAC, t0));
        assert_eq!(c.lookup(IP, t0 + Duration::from_secs(59)), Lookup::Hit(MAC));
        assert_eq!(
            c.lookup(IP, t0 + Duration::from_secs(61)),
            Lookup::HitRefresh(MAC)
        );
        assert_eq!(c.lookup(IP, t0 + Duration::from_secs(62)), Lookup::Hit(MAC));
        assert_eq!(
            c.lookup(IP, t0 + Duration::from_secs(121)),
            Lookup::MissRequest
        );
    }

    #[test]
    fn retries_then_gives_up() {
        let mut c = cache();
        let mut t = Instant::ZERO;
        c.lookup(IP, t);
        let (mut ask, mut failed) = (vec![], vec![]);
        for _ in 0..2 {
            t = c.deadline();
            c.on_timeout(t, &mut ask, &mut failed);
        }
        assert_eq!(ask, vec![IP, IP]);
        assert!(failed.is_empty());
        t = c.deadline();
        c.on_timeout(t, &mut ask, &mut failed);
        assert_eq!(failed, vec![IP]);
        assert_eq!(c.len(), 0);
        assert!(c.deadline().is_never());
    }

    #[test]
    fn capacity_evicts_oldest() {
        let mut c = cache();
        c.insert(Ipv4Addr::new(198, 18, 0, 1), MAC, Instant::from_millis(1));
        c.insert(Ipv4Addr::new(198, 18, 0, 2), MAC, Instant::from_millis(2));
        c.insert(Ipv4Addr::new(198, 18, 0, 3), MAC, Instant::from_millis(3));
        assert_eq!(c.len(), 2);
        assert_eq!(
            c.lookup(Ipv4Addr::new(198, 18, 0, 1), Instant::from_millis(4)),
            Lookup::MissRequest
        );
    }
}
