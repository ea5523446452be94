//! Which statistics entries make room for a new name (docs/guarantees.md,
//! "Statistics and shadow mode"): the policy behind
//! `rate_limiter.stats_max`, pure so that it can be tested on its own. The
//! extension keeps one shared table of at most `stats_max` counted names
//! for every database of the server; when it is full and a name not in it
//! is counted, [`victims`] says which entries go.
//!
//! Rules, in order:
//! 1. **Names anyone can invent never push out defined limits.** An entry
//!    is *defined* when its name has a definition (`rate_limiter.define`,
//!    which only a managing role may call); any caller may make new
//!    undefined names with inline configs. A newcomer without a definition
//!    may evict only entries without one; a defined newcomer evicts
//!    undefined entries first, then defined ones.
//! 2. **No database takes another's room.** Each database present (the
//!    newcomer's included) has a fair share, `capacity / databases`. A
//!    newcomer whose database holds its share or more evicts only entries
//!    of its own database; one below its share evicts only entries of
//!    databases above theirs, and never takes one below its share.
//! 3. Within those, the least-used entries (fewest calls) go first, up to
//!    `batch` of them (as `pg_stat_statements` evicts a share of its
//!    entries at once, so that a stream of new names does not scan the
//!    table for every one).
//!
//! When nothing may be evicted (say a database's own share is full of
//! defined names and the newcomer has no definition) the answer is empty:
//! the newcomer is not counted, and the extension counts that too.

use std::collections::HashMap;

/// An entry of the full table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupant {
    /// The database (an OID).
    pub database: u32,
    /// Whether its name has a definition.
    pub defined: bool,
    /// Consuming decisions counted since its last reset.
    pub calls: u64,
}

/// The name that needs an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Newcomer {
    pub database: u32,
    pub defined: bool,
}

/// The fair share of each database: `capacity` entries over the databases
/// among `occupants` and the newcomer's (at least one entry).
pub fn fair_share(occupants: &[Occupant], newcomer: Newcomer, capacity: usize) -> usize {
    let mut databases: Vec<u32> = occupants.iter().map(|o| o.database).collect();
    databases.push(newcomer.database);
    databases.sort_unstable();
    databases.dedup();
    (capacity / databases.len()).max(1)
}

/// The indexes (into `occupants`) of the entries to evict so that
/// `newcomer` gets one, at most `batch` (at least one is asked for when
/// `batch` is 0); empty when the rules allow none (see the module
/// documentation). `capacity` is the table's size (`stats_max`).
pub fn victims(
    occupants: &[Occupant],
    newcomer: Newcomer,
    capacity: usize,
    batch: usize,
) -> Vec<usize> {
    let batch = batch.max(1);
    let mut held: HashMap<u32, usize> = HashMap::new();
    for occupant in occupants {
        *held.entry(occupant.database).or_insert(0) += 1;
    }
    let share = fair_share(occupants, newcomer, capacity);
    let own = held.get(&newcomer.database).copied().unwrap_or(0);
    let at_share = own >= share;
    let mut eligible: Vec<usize> = (0..occupants.len())
        .filter(|&index| {
            let occupant = occupants[index];
            let class = newcomer.defined || !occupant.defined;
            let room = if at_share {
                occupant.database == newcomer.database
            } else {
                occupant.database != newcomer.database && held[&occupant.database] > share
            };
            class && room
        })
        .collect();
    // Undefined names first, then the least used; ties by position, so
    // the answer is the same for the same table.
    eligible.sort_by_key(|&index| (occupants[index].defined, occupants[index].calls, index));
    let mut taken: HashMap<u32, usize> = HashMap::new();
    let mut chosen = Vec::new();
    for index in eligible {
        if chosen.len() == batch {
            break;
        }
        let database = occupants[index].database;
        let count = taken.entry(database).or_insert(0);
        // Another database gives up only what it holds above its share.
        if database != newcomer.database && held[&database] - *count <= share {
            continue;
        }
        *count += 1;
        chosen.push(index);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occupant(database: u32, defined: bool, calls: u64) -> Occupant {
        Occupant {
            database,
            defined,
            calls,
        }
    }

    #[test]
    fn an_undefined_name_never_evicts_a_defined_one() {
        // Database 1 fills the table with defined limits; database 1's own
        // undefined newcomer finds no room.
        let table: Vec<Occupant> = (0..10).map(|i| occupant(1, true, i)).collect();
        let newcomer = Newcomer {
            database: 1,
            defined: false,
        };
        assert!(victims(&table, newcomer, 10, 2).is_empty());
        // A defined newcomer evicts the least-used defined one.
        let defined = Newcomer {
            database: 1,
            defined: true,
        };
        assert_eq!(victims(&table, defined, 10, 1), vec![0]);
    }

    #[test]
    fn undefined_names_go_first_then_the_least_used() {
        let table = vec![
            occupant(1, true, 0),
            occupant(1, false, 50),
            occupant(1, false, 3),
            occupant(1, true, 1),
        ];
        let newcomer = Newcomer {
            database: 1,
            defined: true,
        };
        assert_eq!(victims(&table, newcomer, 4, 3), vec![2, 1, 0]);
    }

    #[test]
    fn a_database_at_its_share_evicts_only_its_own() {
        // Database 2 floods the table with undefined names; database 1
        // keeps a few defined ones, used little.
        let mut table: Vec<Occupant> = (0..8).map(|i| occupant(2, false, 100 + i)).collect();
        table.push(occupant(1, true, 0));
        table.push(occupant(1, false, 0));
        let newcomer = Newcomer {
            database: 2,
            defined: false,
        };
        let chosen = victims(&table, newcomer, 10, 3);
        assert_eq!(chosen, vec![0, 1, 2]);
        assert!(chosen.iter().all(|&i| table[i].database == 2));
    }

    #[test]
    fn a_database_below_its_share_takes_from_one_above() {
        let mut table: Vec<Occupant> = (0..8).map(|i| occupant(2, false, 100 + i)).collect();
        table.push(occupant(1, true, 0));
        table.push(occupant(1, false, 0));
        let newcomer = Newcomer {
            database: 1,
            defined: false,
        };
        // Share 5: database 2 holds 8, so up to 3 of its entries may go.
        let chosen = victims(&table, newcomer, 10, 5);
        assert_eq!(chosen, vec![0, 1, 2]);
        // A third database: share 3; database 2 gives up 5 at most.
        let newcomer = Newcomer {
            database: 3,
            defined: false,
        };
        assert_eq!(victims(&table, newcomer, 10, 10).len(), 5);
    }

    #[test]
    fn one_entry_at_least() {
        let table = vec![occupant(1, false, 7)];
        let newcomer = Newcomer {
            database: 1,
            defined: false,
        };
        assert_eq!(victims(&table, newcomer, 1, 0), vec![0]);
    }
}
