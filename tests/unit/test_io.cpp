// test_io.cpp - mt_load_idx, mt_load_tsv and mt_randperm on files written here at
// test time (raw and gzipped IDX of every element type, TSVs), with every error:
// a missing file, a bad magic, truncation, a size mismatch, a malformed line.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "helpers.h"

using namespace t;

namespace {

using Bytes = std::vector<unsigned char>;

bool has(const char *needle) { return std::string(mt_last_error()).find(needle) != std::string::npos; }
bool has(const std::string &needle) { return has(needle.c_str()); }

// A fresh directory under $TMPDIR, removed with everything in it at the end.
struct TempDir {
  std::string path;
  std::vector<std::string> files;
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/mt_test_io_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path = buf.data();
  }
  ~TempDir() {
    for (const std::string &f : files) std::remove(f.c_str());
    rmdir(path.c_str());
  }
  std::string file(const std::string &name) {
    std::string p = path + "/" + name;
    files.push_back(p);
    return p;
  }
  std::string write(const std::string &name, const Bytes &b) {
    std::string p = file(name);
    FILE *f = std::fopen(p.c_str(), "wb");
    REQUIRE(f);
    REQUIRE((b.empty() || std::fwrite(b.data(), 1, b.size(), f) == b.size()));
    std::fclose(f);
    return p;
  }
  std::string write(const std::string &name, const std::string &s) { return write(name, Bytes(s.begin(), s.end())); }
  std::string write_gz(const std::string &name, const Bytes &b) {
    std::string p = file(name);
    gzFile f = gzopen(p.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(gzwrite(f, b.data(), (unsigned)b.size()) == (int)b.size());
    REQUIRE(gzclose(f) == Z_OK);
    return p;
  }
  Bytes read(const std::string &p) {
    FILE *f = std::fopen(p.c_str(), "rb");
    REQUIRE(f);
    Bytes b;
    int c;
    while ((c = std::fgetc(f)) != EOF) b.push_back((unsigned char)c);
    std::fclose(f);
    return b;
  }
};

void put_be32(Bytes &b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back((unsigned char)(v >> s));
}

// An IDX file: magic 0x0000<type><ndim>, dims, then the payload as given.
Bytes idx(unsigned char type, const std::vector<uint32_t> &dims, const Bytes &payload) {
  Bytes b = {0, 0, type, (unsigned char)dims.size()};
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

template <class T>
std::vector<T> host(mt_tensor *x) {
  int64_t n = 0;
  MT_OK_OR_FAIL(mt_tensor_numel(x, &n));
  std::vector<T> v((size_t)n);
  MT_OK_OR_FAIL(mt_tensor_copy_to_host(x, v.data(), n * (int64_t)sizeof(T)));
  return v;
}

mt_dtype dtype_of(mt_tensor *x) {
  mt_dtype d;
  MT_OK_OR_FAIL(mt_tensor_dtype(x, &d));
  return d;
}

mt_device device_of(mt_tensor *x) {
  mt_device d;
  MT_OK_OR_FAIL(mt_tensor_device(x, &d));
  return d;
}

// Loads a file that must fail with MT_ERR_IO and a message containing every needle.
void expect_idx_error(const std::string &path, std::initializer_list<std::string> needles,
                      mt_status want = MT_ERR_IO) {
  INFO("loading ", path);
  mt_tensor *out = reinterpret_cast<mt_tensor *>(0x1);
  CHECK(mt_load_idx(&out, path.c_str(), dev()) == want);
  CHECK(out == nullptr);
  INFO("message: ", mt_last_error());
  CHECK(has("mt_load_idx: "));
  for (const std::string &n : needles) CHECK(has(n));
}

}  // namespace

TEST_CASE("idx: uint8 images, raw and gzipped, give the file's dims and bytes") {
  LeakGuard lg;
  TempDir dir;
  Bytes pix;
  for (int i = 0; i < 3 * 2 * 4; i++) pix.push_back((unsigned char)(i * 11));
  Bytes file = idx(0x08, {3, 2, 4}, pix);
  for (bool gz : {false, true}) {
    INFO("gzip: ", gz);
    std::string p = gz ? dir.write_gz("img.gz", file) : dir.write("img", file);
    H x;
    MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
    CHECK(shape_of(x) == Shape{3, 2, 4});
    CHECK(dtype_of(x) == MT_U8);
    CHECK(device_of(x) == dev());
    std::vector<unsigned char> v = host<unsigned char>(x);
    CHECK(Bytes(v.begin(), v.end()) == pix);
  }
  // labels: 1-D
  H y;
  std::string p = dir.write("labels", idx(0x08, {5}, {7, 2, 1, 0, 4}));
  MT_OK_OR_FAIL(mt_load_idx(y.out(), p.c_str(), MT_CPU));
  CHECK(shape_of(y) == Shape{5});
  CHECK(host<unsigned char>(y) == std::vector<unsigned char>{7, 2, 1, 0, 4});
  CHECK(device_of(y) == MT_CPU);
}

TEST_CASE("idx: every element type, big-endian on disk, host order in the tensor") {
  LeakGuard lg;
  TempDir dir;
  SUBCASE("int8 is kept as its bytes in MT_U8") {
    H x;
    std::string p = dir.write("i8", idx(0x09, {3}, {0xFF, 0x00, 0x80}));
    MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
    CHECK(dtype_of(x) == MT_U8);
    CHECK(host<unsigned char>(x) == std::vector<unsigned char>{0xFF, 0x00, 0x80});
  }
  SUBCASE("int16 widens to MT_I32 with its sign") {
    H x;
    std::string p = dir.write_gz("i16.gz", idx(0x0B, {2, 2}, {0xFF, 0xFE, 0x01, 0x2C, 0x80, 0x00, 0x7F, 0xFF}));
    MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
    CHECK(dtype_of(x) == MT_I32);
    CHECK(shape_of(x) == Shape{2, 2});
    CHECK(host<int32_t>(x) == std::vector<int32_t>{-2, 300, -32768, 32767});
  }
  SUBCASE("int32") {
    H x;
    std::string p = dir.write("i32", idx(0x0C, {2}, {0xFF, 0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x00, 0x00}));
    MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
    CHECK(dtype_of(x) == MT_I32);
    CHECK(host<int32_t>(x) == std::vector<int32_t>{-3, 65536});
  }
  SUBCASE("float32") {
    H x;
    // 1.5f = 0x3FC00000, -2.25f = 0xC0100000
    std::string p = dir.write("f32", idx(0x0D, {1, 2}, {0x3F, 0xC0, 0, 0, 0xC0, 0x10, 0, 0}));
    MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
    CHECK(dtype_of(x) == MT_F32);
    CHECK(shape_of(x) == Shape{1, 2});
    CHECK(host<float>(x) == std::vector<float>{1.5f, -2.25f});
  }
  SUBCASE("float64") {
    H x;
    // 0.1 = 0x3FB999999999999A
    std::string p = dir.write("f64", idx(0x0E, {1}, {0x3F, 0xB9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9A}));
    MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
    CHECK(dtype_of(x) == MT_F64);
    CHECK(host<double>(x) == std::vector<double>{0.1});
  }
  SUBCASE("a zero-sized dim gives an empty tensor") {
    H x;
    std::string p = dir.write("empty", idx(0x08, {0, 28, 28}, {}));
    MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
    CHECK(shape_of(x) == Shape{0, 28, 28});
  }
}

TEST_CASE("idx: a missing file, a bad magic, truncation and a size mismatch are MT_ERR_IO naming the path") {
  LeakGuard lg;
  TempDir dir;
  Bytes good = idx(0x08, {2, 3}, {1, 2, 3, 4, 5, 6});

  SUBCASE("missing") {
    std::string p = dir.path + "/no-such-file";
    expect_idx_error(p, {p, "cannot open", "No such file"});
  }
  SUBCASE("a directory") { expect_idx_error(dir.path, {dir.path, "is a directory"}); }
  SUBCASE("bad magic") {
    std::string p = dir.write("text", std::string("hello, this is not an IDX file"));
    expect_idx_error(p, {p, "bad magic 0x68656C6C", "not an IDX file"});
    p = dir.write("type", idx(0x0A, {2}, {1, 2}));  // 0x0A is no IDX type
    expect_idx_error(p, {"bad magic 0x00000A01"});
    p = dir.write("zero-dims", Bytes{0, 0, 8, 0});
    expect_idx_error(p, {"bad magic 0x00000800"});
    p = dir.write_gz("gz-magic.gz", Bytes{0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1});
    expect_idx_error(p, {"bad magic 0x12345678"});
  }
  SUBCASE("truncated magic, dims and data, raw and gzipped") {
    std::string p = dir.write("short", Bytes{0, 0});
    expect_idx_error(p, {p, "truncated", "2 bytes"});
    p = dir.write("empty-file", Bytes{});
    expect_idx_error(p, {"truncated", "0 bytes"});
    p = dir.write("dims", Bytes(good.begin(), good.begin() + 6));  // magic + half of the first dim
    expect_idx_error(p, {"truncated", "declares 2 dims"});
    Bytes cut(good.begin(), good.end() - 2);
    p = dir.write("data", cut);
    expect_idx_error(p, {p, "truncated", "dims [2,3] of uint8 need 6 data bytes", "the file has 4"});
    p = dir.write_gz("data.gz", cut);
    expect_idx_error(p, {"truncated", "the file has 4"});
  }
  SUBCASE("a gzip stream cut short or damaged") {
    std::string full = dir.write_gz("full.gz", good);
    Bytes z = dir.read(full);
    REQUIRE(z.size() > 12);
    std::string p = dir.write("cut.gz", Bytes(z.begin(), z.end() - 12));  // drops the trailer and some data
    mt_tensor *out = nullptr;
    CHECK(mt_load_idx(&out, p.c_str(), dev()) == MT_ERR_IO);
    CHECK(out == nullptr);
    CHECK(has(p));
    Bytes bad = z;
    for (size_t i = 10; i < bad.size() - 8; i++) bad[i] ^= 0x5A;  // garble the deflate data
    p = dir.write("garbled.gz", bad);
    CHECK(mt_load_idx(&out, p.c_str(), dev()) == MT_ERR_IO);
    CHECK(has(p));
    CHECK(out == nullptr);
  }
  SUBCASE("size mismatch: more data than the dims say") {
    Bytes more = good;
    more.push_back(9);
    more.push_back(9);
    std::string p = dir.write("more", more);
    expect_idx_error(p, {p, "size mismatch", "need 6 data bytes", "2 more"});
    p = dir.write_gz("more.gz", more);
    expect_idx_error(p, {"size mismatch", "2 more"});
  }
  SUBCASE("absurd dims fail before allocating") {
    std::string p = dir.write("huge", idx(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFF}, {1, 2, 3}));
    expect_idx_error(p, {"too large"});
    p = dir.write("big", idx(0x08, {1u << 30}, {1, 2, 3}));  // 1 GiB claimed, 3 bytes present
    expect_idx_error(p, {"truncated", "the file has 3"});
  }
  SUBCASE("bad arguments") {
    mt_tensor *out = nullptr;
    CHECK(mt_load_idx(&out, nullptr, dev()) == MT_ERR_INVALID_ARGUMENT);
    CHECK(has("mt_load_idx: path is NULL"));
    std::string p = dir.write("ok", good);
    CHECK(mt_load_idx(nullptr, p.c_str(), dev()) == MT_ERR_INVALID_ARGUMENT);
    CHECK(has("out is NULL"));
    CHECK(mt_load_idx(&out, p.c_str(), (mt_device)7) == MT_ERR_INVALID_ARGUMENT);
    CHECK(has("invalid device 7"));
  }
  // After any of these the library still loads a good file.
  H x;
  std::string p = dir.write("good", good);
  MT_OK_OR_FAIL(mt_load_idx(x.out(), p.c_str(), dev()));
  CHECK(shape_of(x) == Shape{2, 3});
}

namespace {
// Lines of the sales schema: name, code, date, timestamp, quantity, unit price, category,
// user, total, id.
const char *kSales =
    "Apple\tP001\t2024-01-01\t2024-01-01 09:15:02.120\t2\t0.5\tfruit\tu1\t1.05\t1\n"
    "Bread\tP002\t2024-03-01\t2024-03-01 10:00:00.000\t1\t2.25\tbakery\tu2\t2.25\t2\r\n"
    "Pear\tP003\t2023-03-01\t2023-03-01 11:30:59.999\t+3.5\t1e-1\tfruit\tu1\t0.35\t3\n"
    "\n"
    "Cake\tP004\t2024-12-31\t2024-12-31 23:59:59.000\t1\t12\tbakery\tu3\t-12.5\t4\n"
    "Milk\tP005\t2023-12-31\t2023-12-31 08:00:00.000\t 4 \t1.1\tdairy\tu2\t4.4\t5\n"
    "\n";
}  // namespace

TEST_CASE("tsv: numeric, one-hot and day-of-year columns; CRLF and blank lines; gzip") {
  LeakGuard lg;
  TempDir dir;
  std::string plain = dir.write("sales.tsv", std::string(kSales));
  std::string gz = dir.write_gz("sales.tsv.gz", Bytes(kSales, kSales + std::strlen(kSales)));
  for (const std::string &p : {plain, gz}) {
    INFO(p);
    H f, y;
    MT_OK_OR_FAIL(mt_load_tsv(f.out(), y.out(), p.c_str(), "4:num, 6:cat,2:date,5:num,3:date", 8, dev()));
    CHECK(device_of(f) == dev());
    CHECK(dtype_of(f) == MT_F32);
    CHECK(dtype_of(y) == MT_F32);
    // quantity | fruit bakery dairy | day of year | unit price | day of year of the timestamp
    REQUIRE(shape_of(f) == Shape{5, 7});
    REQUIRE(shape_of(y) == Shape{5, 1});
    std::vector<float> want = {
        2,   1, 0, 0, 1,   0.5f,  1,    //
        1,   0, 1, 0, 61,  2.25f, 61,   // 2024 is a leap year
        3.5, 1, 0, 0, 60,  0.1f,  60,   //
        1,   0, 1, 0, 366, 12,    366,  //
        4,   0, 0, 1, 365, 1.1f,  365,
    };
    CHECK(host<float>(f) == want);
    CHECK(host<float>(y) == std::vector<float>{1.05f, 2.25f, 0.35f, -12.5f, 4.4f});
  }
  // The column order of the spec decides the feature order.
  H f, y;
  MT_OK_OR_FAIL(mt_load_tsv(f.out(), y.out(), plain.c_str(), "6:cat", 4, MT_CPU));
  CHECK(shape_of(f) == Shape{5, 3});
  CHECK(host<float>(y) == std::vector<float>{2, 1, 3.5f, 1, 4});
}

TEST_CASE("tsv: a malformed line is MT_ERR_IO naming the path, the line and the column") {
  LeakGuard lg;
  TempDir dir;
  auto expect_err = [&](const std::string &text, const char *cols, int64_t target,
                        std::initializer_list<std::string> needles, mt_status want = MT_ERR_IO) {
    std::string p = dir.write("t" + std::to_string(dir.files.size()) + ".tsv", text);
    INFO("text: ", text, " columns: ", cols);
    mt_tensor *f = reinterpret_cast<mt_tensor *>(0x1), *y = reinterpret_cast<mt_tensor *>(0x1);
    CHECK(mt_load_tsv(&f, &y, p.c_str(), cols, target, dev()) == want);
    CHECK(f == nullptr);
    CHECK(y == nullptr);
    INFO("message: ", mt_last_error());
    CHECK(has("mt_load_tsv: "));
    if (want == MT_ERR_IO) CHECK(has(p));
    for (const std::string &n : needles) CHECK(has(n));
  };
  const std::string ok = "a\t1\t2024-01-05\t3\n";
  expect_err(ok + "b\tx1\t2024-01-05\t3\n", "1:num,2:date", 3, {":2: column 1 (num): 'x1' is not a finite number"});
  expect_err(ok + ok + "b\t1\t2024-02-30\t3\n", "1:num,2:date", 3,
             {":3: column 2 (date): '2024-02-30' does not start with a valid YYYY-MM-DD date"});
  expect_err(ok + "b\t1\t2024-01-05\n", "1:num,2:date", 3, {":2: column 3: missing", "3 tab-separated columns, 4 needed"});
  expect_err(ok + "b\t1\t2024-01-05\tnan\n", "1:num", 3, {":2: column 3 (target): 'nan' is not a finite number"});
  expect_err(ok + "b\t\t2024-01-05\t1\n", "1:num", 3, {":2: column 1 (num): '' is not"});
  expect_err(ok + "\n\nb\t1.5.2\t2024-01-05\t1\n", "1:num", 3, {":4: column 1"});  // blank lines still count
  expect_err("", "1:num", 3, {"no data rows"});
  expect_err("\n\n", "1:num", 3, {"no data rows"});

  // Bad arguments.
  expect_err(ok, "1:foo", 3, {"bad entry '1:foo'"}, MT_ERR_INVALID_ARGUMENT);
  expect_err(ok, "x:num", 3, {"bad entry 'x:num'"}, MT_ERR_INVALID_ARGUMENT);
  expect_err(ok, "1:num,,2:date", 3, {"bad entry ''"}, MT_ERR_INVALID_ARGUMENT);
  expect_err(ok, "", 3, {"bad entry ''"}, MT_ERR_INVALID_ARGUMENT);
  expect_err(ok, "-1:num", 3, {"bad entry '-1:num'"}, MT_ERR_INVALID_ARGUMENT);
  expect_err(ok, "1:num,1:cat", 3, {"column 1 is listed twice"}, MT_ERR_INVALID_ARGUMENT);
  expect_err(ok, "1:num,3:num", 3, {"column 3 is both the target and a feature"}, MT_ERR_INVALID_ARGUMENT);
  expect_err(ok, "1:num", -1, {"target_column must be >= 0, got -1"}, MT_ERR_INVALID_ARGUMENT);

  mt_tensor *f = nullptr, *y = nullptr;
  std::string missing = dir.path + "/missing.tsv";
  CHECK(mt_load_tsv(&f, &y, missing.c_str(), "1:num", 3, dev()) == MT_ERR_IO);
  CHECK(has("mt_load_tsv: " + missing + ": cannot open"));
  CHECK(mt_load_tsv(&f, &y, nullptr, "1:num", 3, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("path is NULL"));
  CHECK(mt_load_tsv(&f, &y, missing.c_str(), nullptr, 3, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("columns is NULL"));
  CHECK(mt_load_tsv(&f, nullptr, missing.c_str(), "1:num", 3, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("out_targets is NULL"));
  CHECK(mt_load_tsv(nullptr, &y, missing.c_str(), "1:num", 3, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("out_features is NULL"));
  CHECK(f == nullptr);
  CHECK(y == nullptr);
}

TEST_CASE("randperm is a permutation, seed-deterministic, and uniform") {
  LeakGuard lg;
  const int64_t n = 1000;
  H a, b, c;
  MT_OK_OR_FAIL(mt_randperm(a.out(), n, 42, dev()));
  MT_OK_OR_FAIL(mt_randperm(b.out(), n, 42, MT_CPU));
  MT_OK_OR_FAIL(mt_randperm(c.out(), n, 43, dev()));
  CHECK(dtype_of(a) == MT_I64);
  CHECK(device_of(a) == dev());
  CHECK(shape_of(a) == Shape{n});
  std::vector<int64_t> pa = host<int64_t>(a), pb = host<int64_t>(b), pc = host<int64_t>(c);
  std::set<int64_t> seen(pa.begin(), pa.end());
  CHECK(seen.size() == (size_t)n);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == n - 1);
  CHECK(pa == pb);  // same seed, any device: the same permutation
  CHECK(pa != pc);
  int64_t fixed = 0;
  for (int64_t i = 0; i < n; i++) fixed += pa[(size_t)i] == i;
  CHECK(fixed < 10);  // a shuffle, not the identity (expected fixed points: 1)

  // Every value lands in every position about equally often: 3000 permutations of 4,
  // each cell expects 750; a chi-square over the 16 cells (9 degrees of freedom) above
  // 40 has probability below 1e-5 for a uniform shuffle.
  const int trials = 3000;
  int count[4][4] = {};
  for (int s = 0; s < trials; s++) {
    H p;
    MT_OK_OR_FAIL(mt_randperm(p.out(), 4, s, MT_CPU));
    std::vector<int64_t> v = host<int64_t>(p);
    for (int i = 0; i < 4; i++) count[i][v[(size_t)i]]++;
  }
  double chi2 = 0, e = trials / 4.0;
  for (auto &row : count)
    for (int c4 : row) chi2 += (c4 - e) * (c4 - e) / e;
  CHECK(chi2 < 40);

  H empty, one;
  MT_OK_OR_FAIL(mt_randperm(empty.out(), 0, 1, dev()));
  CHECK(shape_of(empty) == Shape{0});
  MT_OK_OR_FAIL(mt_randperm(one.out(), 1, 1, dev()));
  CHECK(host<int64_t>(one) == std::vector<int64_t>{0});

  mt_tensor *out = reinterpret_cast<mt_tensor *>(0x1);
  CHECK(mt_randperm(&out, -1, 1, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(out == nullptr);
  CHECK(has("mt_randperm: n must be in [0, 2^40], got -1"));
  CHECK(mt_randperm(nullptr, 3, 1, dev()) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("mt_randperm: out is NULL"));
  CHECK(mt_randperm(&out, 3, 1, (mt_device)-1) == MT_ERR_INVALID_ARGUMENT);
  CHECK(has("invalid device -1"));
}
