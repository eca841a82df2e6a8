// io.h - data loading: IDX files (the MNIST format), tab-separated tables, and
// seeded permutations for shuffled mini-batches. Everything is parsed on the
// host and copied to the requested device once; none of it is recorded on the
// tape. Failures throw mt::Error (IO for the file's content, INVALID_ARGUMENT for
// bad arguments) with a message that names the path and, for a table, the line
// and column.
//
// defines: io::load_idx, io::TsvColumn, io::parse_tsv_columns, io::load_tsv, io::randperm
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tensor.h"

namespace mt {
namespace io {

// An IDX file, raw or gzip-compressed (told apart by its content), as a tensor of
// the file's dims. Element types: 0x08 -> U8, 0x09 -> U8 holding the signed bytes,
// 0x0B (int16) -> I32, 0x0C -> I32, 0x0D -> F32, 0x0E -> F64; big-endian on disk.
Ref load_idx(const std::string &path, Device device);

// One feature column of a table: its 0-based index in the line and how it becomes
// features (NUM: one float; CAT: one-hot over the values in order of first
// appearance; DATE: day of year 1..366 of a YYYY-MM-DD prefix).
struct TsvColumn {
  enum Kind { NUM, CAT, DATE };
  int64_t index;
  Kind kind;
};
// Parses "4:num,6:cat,2:date" (spaces around entries allowed). INVALID_ARGUMENT on error.
std::vector<TsvColumn> parse_tsv_columns(const std::string &spec);

// A tab-separated file without header (raw or gzip) as features F32 [rows, features]
// and targets F32 [rows, 1]; the target column is read as a number.
std::pair<Ref, Ref> load_tsv(const std::string &path, const std::vector<TsvColumn> &columns, int64_t target_column,
                             Device device);

// A permutation of 0..n-1 (I64 [n]): Fisher-Yates on the host where the swap
// partner of position i is drawn from Philox-4x32-10 block i keyed by the seed,
// so every device gets the same permutation for the same seed.
Ref randperm(int64_t n, uint64_t seed, Device device);

}  // namespace io
}  // namespace mt
