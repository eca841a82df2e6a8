// io.cpp - IDX and TSV loaders and seeded permutations (see io.h).
//
// Files are read through zlib's gzopen/gzread, which read gzip streams and, in
// transparent mode, plain files alike, so every loader accepts both. Parsing runs
// on the host; the result is copied to the device in one transfer.
//
// Contents: file reading | IDX | TSV | randperm
#include "io.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "backend/philox.h"
#include "ops.h"

namespace mt {
namespace io {
namespace {

// ---------------------------------------------------------------- file reading

// A file opened for reading, gzip or plain. Reads fail with IO naming the path.
class Reader {
 public:
  explicit Reader(const std::string &path) : path_(path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
      fail(Code::IO, "%s: cannot open: %s", path.c_str(), std::strerror(errno));
    MT_CHECK(!S_ISDIR(st.st_mode), IO, "%s: cannot open: is a directory", path.c_str());
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) fail(Code::IO, "%s: cannot open: %s", path.c_str(), errno ? std::strerror(errno) : "out of memory in zlib");
    gzbuffer(f_, 1 << 17);
  }
  ~Reader() { if (f_) gzclose(f_); }
  Reader(const Reader &) = delete;
  Reader &operator=(const Reader &) = delete;

  // Reads up to n bytes; fewer only at the end of the data. A damaged gzip stream
  // fails; a gzip stream cut short ends early (the callers report truncation) and
  // sets cut_short().
  int64_t read(void *dst, int64_t n) {
    int64_t got = 0;
    while (got < n) {
      unsigned chunk = (unsigned)std::min<int64_t>(n - got, 1 << 30);
      int r = gzread(f_, (char *)dst + got, chunk);
      if (r < 0 || (r < (int)chunk && !gzeof(f_))) check_stream();
      if (r <= 0) break;
      got += r;
      if (r < (int)chunk) { check_stream(); break; }
    }
    bytes_ += got;
    return got;
  }
  // Everything left, appended to out.
  void read_rest(std::string &out) {
    char buf[1 << 16];
    int64_t r;
    while ((r = read(buf, sizeof buf)) > 0) out.append(buf, (size_t)r);
  }
  bool cut_short() const { return cut_short_; }
  int64_t bytes_read() const { return bytes_; }  // decompressed bytes so far

 private:
  void check_stream() {
    int err = Z_OK;
    const char *msg = gzerror(f_, &err);
    if (err == Z_OK) return;
    if (err == Z_BUF_ERROR) { cut_short_ = true; gzclearerr(f_); return; }  // "unexpected end of file"
    if (err == Z_ERRNO) fail(Code::IO, "%s: read error: %s", path_.c_str(), std::strerror(errno));
    // zlib's message starts with the path; keep only what follows it.
    std::string m = msg ? msg : "unknown zlib error";
    if (m.compare(0, path_.size() + 2, path_ + ": ") == 0) m.erase(0, path_.size() + 2);
    fail(Code::IO, "%s: corrupt gzip stream: %s", path_.c_str(), m.c_str());
  }
  std::string path_;
  gzFile f_ = nullptr;
  int64_t bytes_ = 0;
  bool cut_short_ = false;
};

// ---------------------------------------------------------------- IDX

struct IdxType {
  uint8_t code;
  int64_t disk_size;  // bytes per element in the file
  DType dtype;        // element type of the tensor
  const char *name;
};
constexpr IdxType kIdxTypes[] = {
    {0x08, 1, DType::U8, "uint8"},  {0x09, 1, DType::U8, "int8"},      {0x0B, 2, DType::I32, "int16"},
    {0x0C, 4, DType::I32, "int32"}, {0x0D, 4, DType::F32, "float32"}, {0x0E, 8, DType::F64, "float64"},
};

uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

// Big-endian elements of `t` in src -> host-order elements of t.dtype in dst.
void idx_convert(void *dst, const unsigned char *src, int64_t n, const IdxType &t) {
  switch (t.code) {
    case 0x08:
    case 0x09:
      if (n) std::memcpy(dst, src, (size_t)n);  // an empty file's data may be NULL
      break;
    case 0x0B:
      for (int64_t i = 0; i < n; i++)
        ((int32_t *)dst)[i] = (int16_t)(uint16_t)((unsigned)src[2 * i] << 8 | src[2 * i + 1]);
      break;
    case 0x0C:
    case 0x0D:  // int32 and float32: the same 4-byte swap
      for (int64_t i = 0; i < n; i++) {
        uint32_t v = be32(src + 4 * i);
        std::memcpy((char *)dst + 4 * i, &v, 4);
      }
      break;
    case 0x0E:
      for (int64_t i = 0; i < n; i++) {
        uint64_t v = (uint64_t)be32(src + 8 * i) << 32 | be32(src + 8 * i + 4);
        std::memcpy((char *)dst + 8 * i, &v, 8);
      }
      break;
    default: MT_ASSERT(false);
  }
}

// ---------------------------------------------------------------- TSV

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The field as it appears in a message: quoted, at most 40 characters.
std::string show(std::string_view s) {
  std::string q = "'" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "...'" : "'");
  return q;
}

bool parse_number(std::string_view s, double &out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(out);
}

bool is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

// Day of year (1..366) of a YYYY-MM-DD prefix, or 0 when the prefix is not a date.
int day_of_year(std::string_view s) {
  s = trim(s);
  if (s.size() < 10 || s[4] != '-' || s[7] != '-') return 0;
  int v[3] = {0, 0, 0};
  const int start[3] = {0, 5, 8}, len[3] = {4, 2, 2};
  for (int f = 0; f < 3; f++)
    for (int i = 0; i < len[f]; i++) {
      char c = s[(size_t)(start[f] + i)];
      if (c < '0' || c > '9') return 0;
      v[f] = v[f] * 10 + (c - '0');
    }
  static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int y = v[0], m = v[1], d = v[2];
  if (m < 1 || m > 12) return 0;
  int dim = days[m - 1] + (m == 2 && is_leap(y) ? 1 : 0);
  if (d < 1 || d > dim) return 0;
  int doy = d;
  for (int i = 0; i < m - 1; i++) doy += days[i] + (i == 1 && is_leap(y) ? 1 : 0);
  return doy;
}

}  // namespace

// ---------------------------------------------------------------- IDX
Ref load_idx(const std::string &path, Device device) {
  Reader in(path);
  unsigned char head[4];
  int64_t got = in.read(head, 4);
  MT_CHECK(got == 4, IO, "%s: truncated: %lld bytes, shorter than the 4-byte IDX magic", path.c_str(), (long long)got);
  uint32_t magic = be32(head);
  const IdxType *type = nullptr;
  for (const IdxType &t : kIdxTypes)
    if (t.code == head[2]) type = &t;
  MT_CHECK(head[0] == 0 && head[1] == 0 && type && head[3] >= 1 && head[3] <= kMaxDims, IO,
           "%s: bad magic 0x%08X: not an IDX file (expected 0x0000TTNN: two zero bytes, a type TT of "
           "08/09/0B/0C/0D/0E and 1..%d dims NN)",
           path.c_str(), magic, kMaxDims);
  int ndim = head[3];

  std::vector<unsigned char> dims_raw((size_t)ndim * 4);
  got = in.read(dims_raw.data(), ndim * 4);
  MT_CHECK(got == ndim * 4, IO, "%s: truncated: the header declares %d dims but the file ends after %lld of their %d bytes",
           path.c_str(), ndim, (long long)got, ndim * 4);
  Shape shape((size_t)ndim);
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    shape[(size_t)i] = be32(&dims_raw[(size_t)i * 4]);
    MT_CHECK(shape[(size_t)i] == 0 || numel <= (int64_t(1) << 46) / shape[(size_t)i], IO,
             "%s: size mismatch: dims %s are too large to be real", path.c_str(), shape_str(shape).c_str());
    numel *= shape[(size_t)i];
  }
  const int64_t header = 4 + 4 * (int64_t)ndim;
  const int64_t want = numel * type->disk_size;

  // Read in pieces so that a header that claims more than the file holds fails as
  // truncated without first allocating what it claims.
  std::vector<unsigned char> raw;
  raw.reserve((size_t)std::min<int64_t>(want, int64_t(1) << 28));
  int64_t have = 0;
  while (have < want) {
    int64_t piece = std::min<int64_t>(want - have, int64_t(1) << 24);
    raw.resize((size_t)(have + piece));
    int64_t r = in.read(raw.data() + have, piece);
    have += r;
    if (r < piece) break;
  }
  MT_CHECK(have == want, IO,
           "%s: truncated: dims %s of %s need %lld data bytes after the %lld-byte header, the file has %lld%s",
           path.c_str(), shape_str(shape).c_str(), type->name, (long long)want, (long long)header, (long long)have,
           in.cut_short() ? " (the gzip stream ends early)" : "");
  std::string extra;
  in.read_rest(extra);
  MT_CHECK(extra.empty(), IO,
           "%s: size mismatch: dims %s of %s need %lld data bytes after the %lld-byte header, the file has %lld more",
           path.c_str(), shape_str(shape).c_str(), type->name, (long long)want, (long long)header,
           (long long)extra.size());

  Ref host = ops::empty(shape, type->dtype, Device::CPU);
  idx_convert(host->data(), raw.data(), numel, *type);
  std::vector<unsigned char>().swap(raw);
  return ops::to_device(host, device);
}

// ---------------------------------------------------------------- TSV
std::vector<TsvColumn> parse_tsv_columns(const std::string &spec) {
  std::vector<TsvColumn> cols;
  std::string_view rest(spec);
  size_t pos = 0;
  while (true) {
    size_t comma = rest.find(',', pos);
    std::string_view entry = trim(rest.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    size_t colon = entry.find(':');
    std::string_view idx = colon == std::string_view::npos ? entry : trim(entry.substr(0, colon));
    std::string_view kind = colon == std::string_view::npos ? std::string_view() : trim(entry.substr(colon + 1));
    int64_t index = -1;
    auto r = std::from_chars(idx.data(), idx.data() + idx.size(), index);
    bool idx_ok = !idx.empty() && r.ec == std::errc() && r.ptr == idx.data() + idx.size() && index >= 0;
    TsvColumn c{index, TsvColumn::NUM};
    bool kind_ok = true;
    if (kind == "num") c.kind = TsvColumn::NUM;
    else if (kind == "cat") c.kind = TsvColumn::CAT;
    else if (kind == "date") c.kind = TsvColumn::DATE;
    else kind_ok = false;
    MT_CHECK(idx_ok && kind_ok, INVALID_ARGUMENT,
             "columns \"%s\": bad entry '%.*s' (expected <index>:<num|cat|date> with a 0-based index, e.g. \"4:num,6:cat\")",
             spec.c_str(), (int)entry.size(), entry.data());
    for (const TsvColumn &o : cols)
      MT_CHECK(o.index != c.index, INVALID_ARGUMENT, "columns \"%s\": column %lld is listed twice", spec.c_str(),
               (long long)c.index);
    cols.push_back(c);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return cols;
}

std::pair<Ref, Ref> load_tsv(const std::string &path, const std::vector<TsvColumn> &columns, int64_t target_column,
                             Device device) {
  MT_CHECK(!columns.empty(), INVALID_ARGUMENT, "no feature columns given");
  MT_CHECK(target_column >= 0, INVALID_ARGUMENT, "target_column must be >= 0, got %lld", (long long)target_column);
  int64_t max_col = target_column;
  for (const TsvColumn &c : columns) {
    MT_CHECK(c.index != target_column, INVALID_ARGUMENT, "column %lld is both the target and a feature",
             (long long)c.index);
    max_col = std::max(max_col, c.index);
  }

  std::string text;
  {
    Reader in(path);
    in.read_rest(text);
    MT_CHECK(!in.cut_short(), IO, "%s: truncated: the gzip stream ends early (after %lld bytes)", path.c_str(),
             (long long)in.bytes_read());
  }

  // Per row: one value per num/date column and one category id per cat column,
  // in the order of `columns`; one-hot widths are known only at the end.
  const size_t ncols = columns.size();
  std::vector<double> vals, targets;
  std::vector<int32_t> cat_ids;
  std::vector<std::unordered_map<std::string, int32_t>> cats(ncols);
  std::vector<std::string_view> fields((size_t)max_col + 1);
  int64_t rows = 0, line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    line_no++;
    if (trim(line).empty()) continue;  // blank lines (a trailing one, CRLF endings) are skipped

    // Split only as far as the last column needed.
    int64_t nf = 0;
    size_t start = 0;
    while (nf <= max_col) {
      size_t tab = line.find('\t', start);
      fields[(size_t)nf++] = line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start);
      if (tab == std::string_view::npos) break;
      start = tab + 1;
    }
    MT_CHECK(nf > max_col, IO, "%s:%lld: column %lld: missing (the line has %lld tab-separated columns, %lld needed)",
             path.c_str(), (long long)line_no, (long long)nf, (long long)nf, (long long)max_col + 1);

    for (size_t c = 0; c < ncols; c++) {
      std::string_view f = fields[(size_t)columns[c].index];
      switch (columns[c].kind) {
        case TsvColumn::NUM: {
          double v;
          MT_CHECK(parse_number(f, v), IO, "%s:%lld: column %lld (num): %s is not a finite number", path.c_str(),
                   (long long)line_no, (long long)columns[c].index, show(f).c_str());
          vals.push_back(v);
          break;
        }
        case TsvColumn::DATE: {
          int d = day_of_year(f);
          MT_CHECK(d > 0, IO, "%s:%lld: column %lld (date): %s does not start with a valid YYYY-MM-DD date",
                   path.c_str(), (long long)line_no, (long long)columns[c].index, show(f).c_str());
          vals.push_back(d);
          break;
        }
        case TsvColumn::CAT: {
          auto it = cats[c].emplace(std::string(trim(f)), (int32_t)cats[c].size()).first;
          cat_ids.push_back(it->second);
          break;
        }
      }
    }
    double t;
    std::string_view tf = fields[(size_t)target_column];
    MT_CHECK(parse_number(tf, t), IO, "%s:%lld: column %lld (target): %s is not a finite number", path.c_str(),
             (long long)line_no, (long long)target_column, show(tf).c_str());
    targets.push_back(t);
    rows++;
  }
  MT_CHECK(rows > 0, IO, "%s: no data rows", path.c_str());
  std::string().swap(text);

  int64_t width = 0;
  for (size_t c = 0; c < ncols; c++) width += columns[c].kind == TsvColumn::CAT ? (int64_t)cats[c].size() : 1;
  int64_t n_vals = (int64_t)(vals.size() / (size_t)rows), n_cats = (int64_t)(cat_ids.size() / (size_t)rows);

  Ref feat = ops::full({rows, width}, 0.0, DType::F32, Device::CPU);
  Ref targ = ops::empty({rows, 1}, DType::F32, Device::CPU);
  float *fp = (float *)feat->data(), *tp = (float *)targ->data();
  for (int64_t r = 0; r < rows; r++) {
    float *row = fp + r * width;
    const double *v = vals.data() + r * n_vals;
    const int32_t *k = cat_ids.data() + r * n_cats;
    int64_t off = 0;
    for (size_t c = 0; c < ncols; c++) {
      if (columns[c].kind == TsvColumn::CAT) {
        row[off + *k++] = 1.0f;
        off += (int64_t)cats[c].size();
      } else {
        row[off++] = (float)*v++;
      }
    }
    tp[r] = (float)targets[(size_t)r];
  }
  return {ops::to_device(feat, device), ops::to_device(targ, device)};
}

// ---------------------------------------------------------------- randperm
Ref randperm(int64_t n, uint64_t seed, Device device) {
  MT_CHECK(n >= 0 && n <= (int64_t(1) << 40), INVALID_ARGUMENT, "n must be in [0, 2^40], got %lld", (long long)n);
  Ref host = ops::empty({n}, DType::I64, Device::CPU);
  int64_t *p = (int64_t *)host->data();
  for (int64_t i = 0; i < n; i++) p[i] = i;
  // The key differs from mt_tensor_rand's so the same seed gives unrelated streams.
  const uint64_t key = seed ^ 0x72616E6470726D31ULL;  // "randprm1"
  for (int64_t i = n - 1; i > 0; i--) {
    Philox4 r = philox4x32_10((uint64_t)i, key);
    uint64_t bits = (uint64_t)r.v[0] << 32 | r.v[1];
    // j uniform in [0, i] by a 64x64 -> 128-bit multiply (bias below (i+1) / 2^64).
    int64_t j = (int64_t)(((unsigned __int128)bits * (uint64_t)(i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return ops::to_device(host, device);
}

}  // namespace io
}  // namespace mt
