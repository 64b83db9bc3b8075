import subprocess, sys, shutil
# (name, file, old, new, test args)
M = [
 ("frees reusable at once (no pending)", "crates/e4-fs/src/writer.rs",
  "            self.blocks\n                .free_in_transaction(\n                    e4_alloc::Extent {\n                        start: at,\n                        len: piece,\n                    },\n                    &mut frees,\n                )",
  "            let _ = &mut frees;\n            self.blocks\n                .free(\n                    e4_alloc::Extent {\n                        start: at,\n                        len: piece,\n                    },\n                    slot,\n                )",
  ["--test", "write_cases"]),
 ("no retry after a commit when full", "crates/e4-fs/src/file_write.rs",
  "                if self.writer.as_ref().is_some_and(|w| w.pending_blocks() > 0) =>",
  "                if false =>",
  ["--test", "write_cases"]),
 ("orphan list not written", "crates/e4-fs/src/writer.rs",
  "        self.superblock.lock().last_orphan = orphans.first().copied().unwrap_or(0);",
  "        let _ = orphans.first();",
  ["--test", "write_cases"]),
 ("stale inode numbers accepted", "crates/e4-fs/src/file_write.rs",
  "        if state.deleted || (inode.links_count() == 0 && state.open_count == 0) {",
  "        if state.deleted && inode.links_count() == 99 {",
  ["--test", "write_cases"]),
 ("extent blocks not sealed", "crates/e4-fs/src/block_checksums.rs",
  "            (BlockKind::ExtentNode, Some(seed)) => seal_node(bytes, seed),",
  "            (BlockKind::ExtentNode, Some(_)) => {}",
  ["--test", "write_growth", "punching"]),
 ("i_blocks ignores tree blocks", "crates/e4-fs/src/file_write.rs",
  "        let counted = self.add_blocks(inode, data_blocks + tree_blocks);\n        outcome.and(counted).map_err",
  "        let counted = self.add_blocks(inode, data_blocks + tree_blocks * 0);\n        outcome.and(counted).map_err",
  ["--test", "write_model"]),
 ("parent link not dropped on rmdir", "crates/e4-fs/src/namespace.rs",
  "            if is_dir {\n                Self::drop_dir_link(&mut dir.inode);",
  "            if is_dir {\n                let _ = &dir.inode;",
  ["--test", "write_model"]),
 ("dotdot not rewritten on a move", "crates/e4-fs/src/namespace.rs",
  "            if source_dir && moving {\n                self.edit_dir(io, format, &mut state(locked, source).inode, |e| {\n                    e.set_parent(new_parent)\n                })?;",
  "            if source_dir && moving {\n                let _ = new_parent;",
  ["--test", "write_model"]),
 ("no descriptor write-back", "crates/e4-fs/src/writer.rs",
  "        self.write_descriptors(fs, changed)?;\n",
  "",
  ["--test", "write_model"]),
 ("new inode's handle never put in the cache", "crates/e4-fs/src/namespace.rs",
  "            let handle = self.inodes.insert_new(inode);\n            let linked",
  "            let handle = std::sync::Arc::new(crate::inode_cache::InodeCache::new()).insert_new(inode.clone());\n            let _ = &handle;\n            let handle = { let h = handle; h };\n            let linked",
  ["--test", "write_stress"]),
 ("inline dir i_size not updated", "crates/e4-fs/src/inline_dir.rs",
  "        self.inode.set_size(content.len() as u64);\n        Ok(())",
  "        Ok(())",
  ["--test", "inline_write"]),
 ("inline dir conversion leaves the last record short", "crates/e4-fs/src/dir_block.rs",
  "        leaf.set_rec_len(last, end - last);",
  "",
  ["--test", "inline_write"]),
 ("inline file moved out keeps system.data", "crates/e4-fs/src/inline_file.rs",
  "        data.remove(&mut state.inode)?;\n",
  "        state.inode.record.flags &= !e4_format::inode::flags::INLINE_DATA;\n",
  ["--test", "inline_write"]),
 ("inline content not cut to i_size", "crates/e4-fs/src/inline_file.rs",
  "        content.resize(state.inode.size().min(content.len() as u64) as usize, 0);",
  "",
  ["--test", "inline_write"]),
 ("inline dir set_parent not saved", "crates/e4-fs/src/inline_dir.rs",
  "        dir.set_parent(parent_ino);\n        self.save(&mut data, &dir)",
  "        dir.set_parent(parent_ino);\n        let _ = (&mut data, &dir);\n        Ok(())",
  ["--test", "inline_write"]),
 ("inline capacity ignores other in-inode attributes", "crates/e4-fs/src/inline_data.rs",
  "        let entries = self.with_value(vec![0; value_len]);",
  "        let entries = vec![system_data_entry(vec![0; value_len])];",
  ["--lib", "inline_data"]),
 ("inline punch/zero writes no zeros", "crates/e4-fs/src/file_write.rs",
  "            if zeroes {",
  "            if zeroes && false {",
  ["--test", "inline_write"]),
 ("inline: new directories never start inline", "crates/e4-fs/src/namespace.rs",
  "        let mut data = InlineData::load(inode)?;\n        let content = empty_inline_dir(parent);",
  "        return Ok(false);\n        #[allow(unreachable_code)]\n        let mut data = InlineData::load(inode)?;\n        let content = empty_inline_dir(parent);",
  ["--test", "write_model"]),
 ("inline: a file owning blocks starts inline", "crates/e4-fs/src/inline_file.rs",
  "            && inode.blocks_512(false, self.block_size()) == 0",
  "",
  ["--test", "inline_write"]),
]
only = sys.argv[1:] 
for name, path, old, new, args in M:
    if only and not any(o in name for o in only): continue
    src = open(path).read()
    if old not in src:
        print(f"SKIP (anchor missing): {name}"); continue
    shutil.copy(path, "/tmp/mut.bak")
    open(path,"w").write(src.replace(old, new, 1))
    try:
        r = subprocess.run(["timeout","-k","5","600","cargo","test","-q","-p","e4-fs"]+args, capture_output=True, text=True)
        out = r.stdout + r.stderr
        caught = r.returncode != 0
        compile_err = "error[" in out and "could not compile" in out
        print(f"{'COMPILE-ERR' if compile_err else ('CAUGHT' if caught else 'SURVIVED')}: {name} ({' '.join(args)})", flush=True)
    finally:
        shutil.copy("/tmp/mut.bak", path)
