//! Property test of the statistics' eviction policy (docs/guarantees.md,
//! "Statistics and shadow mode"): on random full tables, whatever is
//! evicted obeys the rules, and room is found whenever the rules allow any.

use proptest::prelude::*;
use rate_limiter_algorithm::eviction::{fair_share, victims, Newcomer, Occupant};
use std::collections::HashMap;

fn table() -> impl Strategy<Value = (Vec<Occupant>, Newcomer, usize)> {
    let occupant = (0u32..4, proptest::bool::weighted(0.4), 0u64..20).prop_map(
        |(database, defined, calls)| Occupant {
            database,
            defined,
            calls,
        },
    );
    (
        proptest::collection::vec(occupant, 1..60),
        0u32..5,
        any::<bool>(),
        0usize..8,
    )
        .prop_map(|(occupants, database, defined, batch)| {
            (occupants, Newcomer { database, defined }, batch)
        })
}

fn held(occupants: &[Occupant]) -> HashMap<u32, usize> {
    let mut held = HashMap::new();
    for occupant in occupants {
        *held.entry(occupant.database).or_insert(0) += 1;
    }
    held
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn eviction_obeys_the_rules((occupants, newcomer, batch) in table()) {
        // The table is full: its size is its capacity.
        let capacity = occupants.len();
        let chosen = victims(&occupants, newcomer, capacity, batch);
        let share = fair_share(&occupants, newcomer, capacity);
        let before = held(&occupants);
        let own = before.get(&newcomer.database).copied().unwrap_or(0);
        // At most the batch, each at most once.
        prop_assert!(chosen.len() <= batch.max(1));
        let mut unique = chosen.clone();
        unique.sort_unstable();
        unique.dedup();
        prop_assert_eq!(unique.len(), chosen.len());
        let mut after = before.clone();
        for &index in &chosen {
            let victim = occupants[index];
            // A name without a definition never evicts a defined one.
            prop_assert!(newcomer.defined || !victim.defined);
            if own >= share {
                // At its share: only its own entries.
                prop_assert_eq!(victim.database, newcomer.database);
            } else {
                // Below: only another database's, above its share.
                prop_assert_ne!(victim.database, newcomer.database);
            }
            *after.get_mut(&victim.database).unwrap() -= 1;
        }
        // Another database never goes below its share.
        for (database, count) in &after {
            if *database != newcomer.database && before[database] != *count {
                prop_assert!(*count >= share, "database {} left {} < {}", database, count, share);
            }
        }
        // Undefined entries go before defined ones, then the least used.
        let eligible = |o: &Occupant| {
            (newcomer.defined || !o.defined)
                && if own >= share {
                    o.database == newcomer.database
                } else {
                    o.database != newcomer.database && before[&o.database] > share
                }
        };
        if let Some(worst) = chosen.iter().map(|&i| (occupants[i].defined, occupants[i].calls)).max() {
            // Every eligible entry left of the newcomer's own database
            // ranks no lower than the worst one chosen.
            for (index, occupant) in occupants.iter().enumerate() {
                if eligible(occupant) && !chosen.contains(&index) && occupant.database == newcomer.database {
                    prop_assert!((occupant.defined, occupant.calls) >= worst);
                }
            }
        }
        // Room is found whenever any entry may go.
        let any = occupants.iter().any(eligible);
        prop_assert_eq!(chosen.is_empty(), !any);
    }
}
