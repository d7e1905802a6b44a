//! The pCPU kernel a receiver runs over every gram's descriptors besides
//! the integrity check (`GramReceiverConfig::exec`), chunked as the
//! executor chunks, so the session's result equals `pfs exec` over the
//! same schedule.

use pfs_exec::kernel::{Acc, Kernel, Output, CHUNK_DESCS};

/// A pCPU kernel run across a session's grams with the executor's chunking
/// (fixed runs of `CHUNK_DESCS` descriptors, crossing gram boundaries), so the
/// result equals `pfs exec` over the same schedule.
pub(super) struct SessionExec {
    kernel: Kernel,
    total: Acc,
    chunk: Acc,
    in_chunk: usize,
}

impl std::fmt::Debug for SessionExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionExec")
            .field("kernel", &self.kernel.id)
            .finish()
    }
}

impl SessionExec {
    pub(super) fn new(kernel: Kernel) -> Self {
        Self {
            kernel,
            total: kernel.acc(),
            chunk: kernel.acc(),
            in_chunk: 0,
        }
    }

    #[inline]
    pub(super) fn update(&mut self, bytes: &[u8]) {
        if !self.kernel.id.shardable() {
            // Stream kernels (FNV-1a) run one state over everything.
            self.kernel.update(&mut self.total, bytes);
            return;
        }
        self.kernel.update(&mut self.chunk, bytes);
        self.in_chunk += 1;
        if self.in_chunk == CHUNK_DESCS {
            let done = std::mem::replace(&mut self.chunk, self.kernel.acc());
            self.kernel.combine(&mut self.total, done);
            self.in_chunk = 0;
        }
    }

    pub(super) fn finish(mut self) -> Output {
        if self.in_chunk > 0 {
            self.kernel.combine(&mut self.total, self.chunk);
        }
        self.kernel.finish(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pfs_exec::kernel::KernelId;

    /// The session's result is the executor's over the same ranges, however
    /// the ranges fall into grams.
    #[test]
    fn chunks_cross_gram_boundaries() {
        let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 31 % 251) as u8).collect();
        let ranges: Vec<&[u8]> = data.chunks(97).collect();
        for id in [KernelId::SumU64, KernelId::Fnv1a64] {
            let kernel = Kernel::new(id);
            let mut whole = SessionExec::new(kernel);
            for r in &ranges {
                whole.update(r);
            }
            let mut reference = kernel.acc();
            let mut total = kernel.acc();
            for run in ranges.chunks(CHUNK_DESCS) {
                if id.shardable() {
                    let mut acc = kernel.acc();
                    for r in run {
                        kernel.update(&mut acc, r);
                    }
                    kernel.combine(&mut total, acc);
                } else {
                    for r in run {
                        kernel.update(&mut reference, r);
                    }
                }
            }
            let expected = if id.shardable() {
                kernel.finish(total)
            } else {
                kernel.finish(reference)
            };
            assert_eq!(whole.finish(), expected);
        }
    }
}
