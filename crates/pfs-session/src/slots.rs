//! Session slots: at most `max_clients` sessions at once, and at most
//! `max_per_key` of them under one client key, so that one key (however
//! legal its traffic) cannot hold every slot and keep other keys out.
//! Plain connections have no key and are counted only against
//! `max_clients`.

use std::collections::HashMap;
use std::sync::Mutex;

use pfs_auth::PublicKey;

/// Why no slot was free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// `max_clients` sessions are running.
    Server(usize),
    /// This key runs `max_per_key` sessions.
    Key(usize),
}

/// The running sessions, counted.
#[derive(Debug)]
pub(crate) struct Slots {
    max_clients: usize,
    max_per_key: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    active: usize,
    per_key: HashMap<PublicKey, usize>,
}

impl Slots {
    pub(crate) fn new(max_clients: usize, max_per_key: usize) -> Self {
        Self {
            max_clients,
            max_per_key: max_per_key.max(1),
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for a session of `key` (`None`: plain), if one is free.
    pub(crate) fn try_take(&self, key: Option<PublicKey>) -> Result<Slot<'_>, Full> {
        let mut s = self.lock();
        if s.active >= self.max_clients {
            return Err(Full::Server(self.max_clients));
        }
        if let Some(k) = key {
            let n = s.per_key.entry(k).or_default();
            if *n >= self.max_per_key {
                return Err(Full::Key(self.max_per_key));
            }
            *n += 1;
        }
        s.active += 1;
        Ok(Slot { slots: self, key })
    }

    /// Sessions running now.
    #[cfg(test)]
    fn active(&self) -> usize {
        self.lock().active
    }
}

/// A session's slot; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot<'a> {
    slots: &'a Slots,
    key: Option<PublicKey>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut s = self.slots.lock();
        s.active -= 1;
        if let Some(k) = self.key {
            if let Some(n) = s.per_key.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    s.per_key.remove(&k);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_cannot_take_every_slot() {
        let slots = Slots::new(4, 2);
        let (a, b) = (Some(PublicKey([1; 32])), Some(PublicKey([2; 32])));
        let a1 = slots.try_take(a).unwrap();
        let _a2 = slots.try_take(a).unwrap();
        assert_eq!(slots.try_take(a).unwrap_err(), Full::Key(2));
        let _b1 = slots.try_take(b).unwrap();
        let _p = slots.try_take(None).unwrap();
        assert_eq!(slots.try_take(b).unwrap_err(), Full::Server(4));
        drop(a1);
        assert_eq!(slots.active(), 3);
        let _a3 = slots.try_take(a).unwrap();
        assert_eq!(slots.active(), 4);
    }
}
