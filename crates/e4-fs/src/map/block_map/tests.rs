//! The block map against a model (logical → physical), with an independent walk of the
//! pointers after each step.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::io::meta_io::memory::MemoryMetaIo;

const OWNER: Owner = Owner {
    ino: 13,
    generation: 1,
};

type Model = BTreeMap<u64, u64>;

/// The mapping found by walking every pointer from `i_block`; checks that every indirect
/// block is allocated, of kind IndirectBlock, referenced once and not empty, and that no
/// allocated block is unreachable.
fn walk(root: &[u8; I_BLOCK_SIZE], io: &MemoryMetaIo) -> Model {
    let per = (io.block_size / 4) as u64;
    let mut mapping = Model::new();
    let mut indirect = BTreeSet::new();
    fn visit(
        io: &MemoryMetaIo,
        block: u64,
        depth: u32,
        base: u64,
        per: u64,
        mapping: &mut Model,
        indirect: &mut BTreeSet<u64>,
    ) {
        assert!(
            indirect.insert(block),
            "indirect block {block} referenced twice"
        );
        let (kind, bytes) = io.blocks.lock().unwrap()[&block].clone();
        assert_eq!(kind, BlockKind::IndirectBlock);
        assert!(
            bytes.iter().any(|&b| b != 0),
            "empty indirect block {block} kept"
        );
        for i in 0..per {
            let p = u64::from(pointer_at(&bytes, i as usize));
            if p == 0 {
                continue;
            }
            let child_base = base + i * per.pow(depth - 1);
            if depth == 1 {
                mapping.insert(child_base, p);
            } else {
                visit(io, p, depth - 1, child_base, per, mapping, indirect);
            }
        }
    }
    for slot in 0..ROOT_POINTERS {
        let p = u64::from(pointer_at(root, slot));
        if p == 0 {
            continue;
        }
        if slot < 12 {
            mapping.insert(slot as u64, p);
        } else {
            let depth = (slot - 11) as u32;
            let base = 12 + (1..depth).map(|d| per.pow(d)).sum::<u64>();
            visit(io, p, depth, base, per, &mut mapping, &mut indirect);
        }
    }
    assert_eq!(
        *io.allocated.lock().unwrap(),
        indirect,
        "allocated blocks are exactly the reachable indirect blocks"
    );
    mapping
}

#[test]
fn limits_follow_the_block_size_table() {
    for (bs, limit) in [(1024, 16_843_020u64), (4096, 1_074_791_436)] {
        let io = MemoryMetaIo::new(bs, 100_000, 1 << 31);
        let mut root = [0u8; I_BLOCK_SIZE];
        let mut map = BlockMapTree::new(&mut root, &io, OWNER);
        assert_eq!(map.logical_limit(), limit);
        map.insert(limit - 1, 5000, 1).unwrap();
        assert_eq!(
            map.node_blocks_change(),
            3,
            "triple indirect: three new blocks"
        );
        assert!(matches!(
            map.insert(limit, 5001, 1),
            Err(Error::FileTooBig(_))
        ));
        assert!(matches!(
            map.insert(limit - 1, 5001, 2),
            Err(Error::FileTooBig(_))
        ));
        assert!(matches!(map.insert(0, 1 << 32, 1), Err(Error::Invalid(_))));
        assert_eq!(map.find(limit - 1).unwrap(), Some(5000));
        assert_eq!(map.find(limit).unwrap(), None);
        assert_eq!(map.remove(0, u64::MAX).unwrap(), vec![(5000, 1)]);
        assert_eq!(map.node_blocks_change(), 0);
        assert_eq!(root, [0u8; I_BLOCK_SIZE]);
    }
}

#[test]
fn boundaries_of_each_level_map_through_the_right_slot() {
    let io = MemoryMetaIo::new(1024, 100_000, 1 << 31);
    let mut root = [0u8; I_BLOCK_SIZE];
    let mut map = BlockMapTree::new(&mut root, &io, OWNER);
    // 11..13 crosses direct → single, 267..269 single → double, 65803..65805 → triple.
    for (logical, physical) in [(11, 100), (267, 200), (65_803, 300)] {
        map.insert(logical, physical, 3).unwrap();
    }
    let mapping = walk(&root, &io);
    let expected: Model = [
        (11, 100),
        (12, 101),
        (13, 102),
        (267, 200),
        (268, 201),
        (269, 202),
        (65_803, 300),
        (65_804, 301),
        (65_805, 302),
    ]
    .into();
    assert_eq!(mapping, expected);
    // single + double (2) + triple (3) + the double's second level for 65_803 (1) = 7.
    assert_eq!(io.live_blocks(), 7);
}

#[test]
fn remove_returns_contiguous_runs_and_frees_emptied_blocks() {
    let io = MemoryMetaIo::new(1024, 100_000, 1 << 31);
    let mut root = [0u8; I_BLOCK_SIZE];
    let mut map = BlockMapTree::new(&mut root, &io, OWNER);
    map.insert(0, 1000, 600).unwrap();
    assert!(matches!(map.insert(599, 9, 2), Err(Error::Invalid(_))));
    assert_eq!(map.find(600).unwrap(), None);
    // Punch the single indirect range: its block is freed, direct and double stay.
    let runs = map.remove(12, 256).unwrap();
    assert_eq!(runs, vec![(1012, 256)]);
    assert_eq!(pointer_at(&root, 12), 0);
    let mut map = BlockMapTree::new(&mut root, &io, OWNER);
    let runs = map.remove(5, u64::MAX).unwrap();
    assert_eq!(runs, vec![(1005, 7), (1268, 332)]);
    assert_eq!(walk(&root, &io).len(), 5);
    assert_eq!(io.live_blocks(), 0);
}

#[test]
fn no_space_mid_insert_changes_nothing() {
    struct FailingAfter<'a>(&'a MemoryMetaIo, Cell<usize>);
    impl MetaIo for FailingAfter<'_> {
        fn block_size(&self) -> usize {
            self.0.block_size()
        }
        fn visit(
            &self,
            nr: u64,
            kind: BlockKind,
            owner: Owner,
            look: &mut dyn FnMut(&[u8]) -> Result<()>,
        ) -> Result<()> {
            self.0.visit(nr, kind, owner, look)
        }
        fn write(&self, nr: u64, kind: BlockKind, owner: Owner, bytes: &[u8]) -> Result<()> {
            self.0.write(nr, kind, owner, bytes)
        }
        fn allocate(&self, goal: u64, owner: Owner) -> Result<u64> {
            let left = self.1.get();
            if left == 0 {
                return Err(Error::NoSpace(crate::error::Shortage::Blocks));
            }
            self.1.set(left - 1);
            self.0.allocate(goal, owner)
        }
        fn free(&self, start: u64, len: u64, owner: Owner) -> Result<()> {
            self.0.free(start, len, owner)
        }
    }
    let io = MemoryMetaIo::new(1024, 100_000, 1 << 31);
    let failing = FailingAfter(&io, Cell::new(1));
    let mut root = [0u8; I_BLOCK_SIZE];
    let mut map = BlockMapTree::new(&mut root, &failing, OWNER);
    map.insert(0, 1000, 20).unwrap();
    let before = (root, io.blocks.lock().unwrap().clone());
    // The double indirect range needs two blocks; only one is left... none, then one.
    for allowed in [0, 1] {
        failing.1.set(allowed);
        let mut map = BlockMapTree::new(&mut root, &failing, OWNER);
        assert!(matches!(map.insert(260, 5000, 20), Err(Error::NoSpace(_))));
        assert_eq!(map.node_blocks_change(), 0);
        assert!((root, io.blocks.lock().unwrap().clone()) == before);
        assert_eq!(io.live_blocks(), 1);
    }
}

#[test]
fn an_indirect_block_referenced_twice_is_corruption() {
    let io = MemoryMetaIo::new(1024, 100_000, 1 << 31);
    let mut root = [0u8; I_BLOCK_SIZE];
    let mut map = BlockMapTree::new(&mut root, &io, OWNER);
    map.insert(12, 5000, 300).unwrap();
    // Point the double indirect slot's first entry at the single indirect block.
    let single = pointer_at(&root, 12);
    let double = pointer_at(&root, 13);
    let mut bytes = io.blocks.lock().unwrap()[&u64::from(double)].1.clone();
    set_pointer(&mut bytes, 0, single);
    io.write(u64::from(double), BlockKind::IndirectBlock, OWNER, &bytes)
        .unwrap();
    let mut map = BlockMapTree::new(&mut root, &io, OWNER);
    let err = map.remove(0, u64::MAX).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Format(FormatError::Corrupt {
                structure: Structure::BlockMap,
                problem: Problem::BlockReferencedTwice { .. },
                ..
            })
        ),
        "{err}"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Insert { logical: u64, len: u64 },
    Remove { logical: u64, len: u64 },
}

/// Logical blocks around each level's boundaries at 1 KiB blocks.
fn logical() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..300u64,
        250..800u64,
        65_700..66_500u64,
        16_842_900..16_843_020u64
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (logical(), 1..40u64).prop_map(|(logical, len)| Op::Insert { logical, len }),
        1 => (logical(), 1..600u64).prop_map(|(logical, len)| Op::Remove { logical, len }),
        1 => logical().prop_map(|logical| Op::Remove { logical, len: u64::MAX }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        let io = MemoryMetaIo::new(1024, 100_000, 1 << 31);
        let mut root = [0u8; I_BLOCK_SIZE];
        let mut model = Model::new();
        let mut next_physical = 1_000u64;
        let mut node_blocks = 0i64;
        let limit = 16_843_020u64;
        for op in ops {
            let mut map = BlockMapTree::new(&mut root, &io, OWNER);
            match op {
                Op::Insert { logical, len } => {
                    next_physical += 1000;
                    let result = map.insert(logical, next_physical, len);
                    let ok = logical + len <= limit
                        && (logical..logical + len).all(|l| !model.contains_key(&l));
                    prop_assert_eq!(result.is_ok(), ok, "{:?}", result);
                    if ok {
                        for k in 0..len {
                            model.insert(logical + k, next_physical + k);
                        }
                    }
                }
                Op::Remove { logical, len } => {
                    let runs = map.remove(logical, len).unwrap();
                    let end = logical.saturating_add(len);
                    let expected: Vec<u64> = model.range(logical..end).map(|(_, &p)| p).collect();
                    model.retain(|&l, _| l < logical || l >= end);
                    let got: Vec<u64> = runs.iter().flat_map(|&(p, n)| p..p + n).collect();
                    prop_assert_eq!(got, expected);
                    prop_assert!(runs.windows(2).all(|w| w[0].0 + w[0].1 != w[1].0));
                }
            }
            node_blocks += map.node_blocks_change();
            prop_assert_eq!(walk(&root, &io), model.clone());
            prop_assert_eq!(node_blocks, io.live_blocks() as i64);
        }
    }
}
