// Copyright 2026 The GMLake Authors.
//
// Covering what a stitch still misses with one larger free chunk (pure).
//
// A slow path maps whole chunks: held unmapped ones and whole free chunks
// of free blocks that fit what it still misses, then new ones from the
// lake. A physical chunk cannot be split, so when every free chunk is
// larger than the rest (one 2 MiB page of a request among free 4 MiB
// chunks: the small pool's page, the odd last page of a KV-cache block),
// the lake made a new one and reserved memory grew while gigabytes sat
// free. Instead the slow path may map a free chunk larger than
// the rest whole: its extra pages extend the mapping into the unmapped
// pages beside it and become a free tail of the new block, which the
// pool's next requests use (docs/design.md, "Chunk sizes").
//
// The extra pages are bounded: they stay free bytes of one pool, which a
// stitch can take back only once the block beside them is free. And a
// chunk taken out of a free block may be one a shape the program repeats
// wants whole again (a later stitch then maps more), so the large pool
// covers only once the rests the lake made would pass a small share of the
// allocated peak: a program whose shapes strand memory (KV-cache blocks of
// odd pages: thousands), not one that grew a few odd pages (the shipped
// training traces: 1-6, each costing driver calls downstream when covered).

#ifndef GMLAKE_CLIENT_CHUNK_COVER_H_
#define GMLAKE_CLIENT_CHUNK_COVER_H_

#include <cstddef>
#include <cstdint>

namespace gmlake {

// The largest chunk, in pages, that may cover a rest of `rest` pages: the
// rest plus at most `max_extra` pages, and no more than `room` unmapped
// pages beside the mapping can hold. `rest` itself when nothing larger may.
size_t MaxCoverPages(size_t rest, size_t room, size_t max_extra);

// Whether a free chunk of `pages` covers a rest of `rest` pages better
// than the best so far, of `best` pages (0: none yet): larger than the
// rest (one that fits was taken already), at most `max_pages`
// (MaxCoverPages), and smaller than `best` (the fewest extra pages) or,
// with `largest`, larger (the most). The small pool wants the fewest: its
// covers are a page for small blocks. The large pool's covers are mostly
// a tensor that grows a little each step (a KV cache growing by a token)
// short of a page or two: the extra pages are a free tail its next steps
// grow into with no call, so the larger the cover within the bound, the
// fewer stitches. On the replays: colocate_infer 3,586 stitches -> 2,426
// and 43,367 driver calls -> 39,011, llama3b_infer_large 2,799 -> 2,150
// and 47,824 -> 42,632, reserved / live 1.0087 and 1.0081, the training
// traces unchanged (docs/design.md, "A KV cache that grows").
bool BetterCover(size_t pages, size_t best, size_t rest, size_t max_pages,
                 bool largest = false);

// Whether a slow path tries a cover before stealing chunks that fit: in the
// large pool, for a free block growing in place by one page. That is a
// tensor growing a little each step (a KV cache by a token); a free 2 MiB
// chunk that fits serves only this step, and the next page it crosses
// steals again, where a cover's extra pages serve the next steps with no
// call. On the replays: colocate_infer 39,011 driver calls -> 28,269 and
// reserved / live 1.0087 -> 1.0058, llama3b_infer_large 42,632 -> 27,244
// and 1.0081 -> 1.0054; the training traces unchanged (two pages: 27,101
// and 30,024).
bool CoverBeforeStealing(bool small_pool, bool grows_free_block,
                         size_t rest_pages);

// Whether a slow path takes a free chunk out of a free block to cover its
// rest now. The small pool always does: it grows one page at a time, so
// each of its growths among free chunks of max_chunk strands a page. The
// large pool does once `stranded` (bytes the lake made for rests a larger
// free chunk could have covered) reaches `after` x `allocated_peak`
// (0: at once).
bool CoverNow(bool small_pool, uint64_t stranded, uint64_t allocated_peak,
              double after);

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_CHUNK_COVER_H_
