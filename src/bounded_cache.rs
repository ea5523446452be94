//! A backend's cache of looked-up values, bounded in entries and in the
//! bytes of what they hold: when an insert would pass either bound the
//! cache is emptied first, so a backend's memory stays bounded however
//! many names or keys it is asked about. The definitions', composites',
//! overrides' and concurrency limits' caches are each one of these, in a
//! thread-local `RefCell`, emptied on every relcache invalidation
//! (`crate::definitions`).
//!
//! The hash is foldhash's (`foldhash::fast::RandomState`: seeded per map
//! at run time, so keys that collide cannot be worked out from the
//! source), a fraction of std's SipHash's cost: every call looks its name
//! up here.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// Values by key, with the bytes they hold counted (see the module
/// documentation).
pub struct BoundedCache<K, V> {
    map: HashMap<K, V, foldhash::fast::RandomState>,
    /// The bytes the entries hold (as their inserters counted them).
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl<K: Hash + Eq, V> BoundedCache<K, V> {
    /// An empty cache of at most `max_entries` entries holding at most
    /// `max_bytes` bytes.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        BoundedCache {
            map: HashMap::default(),
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// The value cached under `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key)
    }

    /// Caches `value` under `key`, which with it holds `bytes` bytes;
    /// empties the cache first when it is full.
    pub fn insert(&mut self, key: K, bytes: usize, value: V) {
        if self.map.len() >= self.max_entries || self.bytes + bytes > self.max_bytes {
            self.clear();
        }
        if self.map.insert(key, value).is_none() {
            self.bytes += bytes;
        }
    }

    /// Empties the cache, memory included (a new map: `HashMap::clear`
    /// would keep the old one's capacity).
    pub fn clear(&mut self) {
        self.map = HashMap::default();
        self.bytes = 0;
    }
}
