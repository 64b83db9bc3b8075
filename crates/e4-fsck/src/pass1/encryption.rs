//! An inode with `EXT4_ENCRYPT_FL` (e2fsck's `add_encrypted_file`, whatever the
//! superblock's features): its encryption context, the attribute `c`, must be there
//! (`PR_1_MISSING_ENCRYPTION_XATTR`) and be a context of its version
//! (`PR_1_CORRUPT_ENCRYPTION_XATTR`); its policy is recorded for pass 2.

use e4_format::inode::Inode;
use e4_format::xattr::{name_prefix, Xattr, XattrValue};

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::{BlockWalk, WalkMode};
use crate::state::encryption_policies::EncryptionPolicy;
use crate::xattr::lookup::{all_attributes, BlockChecksum};

/// The attribute's key as libext2fs names it: `c`, with no prefix.
const CONTEXT_NAME: &[u8] = b"c";
/// Name indexes libext2fs has a prefix for beyond e4-format's (`lustre.`, `gnu.`): an
/// attribute `c` under them is not the context.
const LIBEXT2FS_ONLY_PREFIXED: [u8; 2] = [5, 10];
/// fscrypt context sizes: version 1 (modes, flags, an 8-byte key descriptor, a 16-byte
/// nonce) and version 2 (modes, flags, 4 reserved bytes, a 16-byte key identifier, the
/// nonce).
const CONTEXT_V1_SIZE: usize = 28;
const CONTEXT_V2_SIZE: usize = 40;
/// The per-file nonce that ends both versions, not part of the policy.
const NONCE_SIZE: usize = 16;

/// Checks the context of `inode`, which has `EXT4_ENCRYPT_FL`, and records its policy.
pub fn check(walk: &BlockWalk<'_>, inode: &Inode) {
    if walk.mode != WalkMode::Claim {
        return;
    }
    let ino = walk.ino;
    // libext2fs's `ext2fs_xattr_get(h, "c")`: attributes of indexes it has no prefix for
    // (the encryption index 9 among them) are named by their stored name alone.
    let context = all_attributes(walk.ctx, inode, BlockChecksum::Verify).and_then(|xattrs| {
        xattrs.into_iter().find(|x: &Xattr| {
            name_prefix(x.index).is_none()
                && !LIBEXT2FS_ONLY_PREFIXED.contains(&x.index)
                && x.name == CONTEXT_NAME
        })
    });
    let Some(context) = context else {
        walk.report(
            ProblemCode::PR_1_MISSING_ENCRYPTION_XATTR,
            Location::Inode(ino),
            format!("inode {ino} has encrypt flag but no encryption extended attribute"),
        );
        return;
    };
    let value = match context.value {
        XattrValue::Inline(v) => v,
        // A value held in an inode is read as empty (a context is 28 or 40 bytes, which
        // no writer moves out of the inode).
        XattrValue::InInode { .. } => Vec::new(),
    };
    match policy_of(&value) {
        Some(policy) => walk.ctx.encryption.record(ino, policy),
        None => walk.report(
            ProblemCode::PR_1_CORRUPT_ENCRYPTION_XATTR,
            Location::Inode(ino),
            format!("encrypted inode {ino} has corrupt encryption extended attribute"),
        ),
    }
}

/// e2fsck's `fscrypt_context_to_policy`: the policy of a context, `None` for a corrupt
/// one (empty, version 0, or a known version of the wrong size).
fn policy_of(context: &[u8]) -> Option<EncryptionPolicy> {
    let size = match context.first()? {
        0 => return None,
        1 => CONTEXT_V1_SIZE,
        2 => CONTEXT_V2_SIZE,
        _ => return Some(EncryptionPolicy::Unrecognized),
    };
    (context.len() == size).then(|| EncryptionPolicy::Known(context[..size - NONCE_SIZE].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_of_contexts() {
        let mut v1 = vec![1, 1, 4, 0];
        v1.extend([7u8; 24]);
        assert_eq!(
            policy_of(&v1),
            Some(EncryptionPolicy::Known(v1[..12].to_vec()))
        );
        let mut v2 = vec![2, 1, 4, 2];
        v2.extend([9u8; 36]);
        assert_eq!(
            policy_of(&v2),
            Some(EncryptionPolicy::Known(v2[..24].to_vec()))
        );
        assert_eq!(policy_of(&v1[..20]), None);
        assert_eq!(policy_of(&v2[..28]), None);
        assert_eq!(policy_of(&[0; 28]), None);
        assert_eq!(policy_of(&[]), None);
        assert_eq!(policy_of(&[3, 1]), Some(EncryptionPolicy::Unrecognized));
    }
}
