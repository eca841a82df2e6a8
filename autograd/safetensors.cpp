// safetensors.cpp - reading and writing safetensors files (see safetensors.h).
// The JSON reader accepts the subset the format uses (objects, arrays, strings with
// escapes, integers); anything else in the header is an IO error naming the offset.
#include "safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "ops.h"

namespace mt {
namespace st {
namespace {

const struct { DType dtype; const char *name; } kDtypes[] = {
    {DType::F32, "F32"}, {DType::F64, "F64"}, {DType::F16, "F16"}, {DType::BF16, "BF16"},
    {DType::I32, "I32"}, {DType::I64, "I64"}, {DType::U8, "U8"},
};

const char *dtype_tag(DType d) {
  for (auto &e : kDtypes)
    if (e.dtype == d) return e.name;
  return "?";
}

// ---------------------------------------------------------------- a small JSON reader
struct Json {
  enum Kind { OBJECT, ARRAY, STRING, NUMBER, OTHER } kind = OTHER;
  std::string str;
  int64_t num = 0;
  std::vector<Json> items;                            // ARRAY
  std::vector<std::pair<std::string, Json>> fields;   // OBJECT, in order
};

class Parser {
 public:
  Parser(const std::string &text, const std::string &path) : s_(text), path_(path) {}
  Json parse() {
    Json j = value(0);
    ws();
    if (i_ != s_.size()) bad("unexpected text after the header object");
    return j;
  }

 private:
  [[noreturn]] void bad(const char *what) const {
    fail(Code::IO, "%s: malformed safetensors header at byte %zu: %s", path_.c_str(), i_, what);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) i_++;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) bad("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) bad("unexpected character");
    i_++;
  }
  Json value(int depth) {
    if (depth > 32) bad("nested too deeply");
    Json j;
    char c = peek();
    if (c == '{') {
      j.kind = Json::OBJECT;
      i_++;
      if (peek() == '}') { i_++; return j; }
      for (;;) {
        std::string k = string();
        expect(':');
        j.fields.emplace_back(std::move(k), value(depth + 1));
        if (peek() == ',') { i_++; continue; }
        expect('}');
        return j;
      }
    }
    if (c == '[') {
      j.kind = Json::ARRAY;
      i_++;
      if (peek() == ']') { i_++; return j; }
      for (;;) {
        j.items.push_back(value(depth + 1));
        if (peek() == ',') { i_++; continue; }
        expect(']');
        return j;
      }
    }
    if (c == '"') {
      j.kind = Json::STRING;
      j.str = string();
      return j;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      j.kind = Json::NUMBER;
      bool neg = c == '-';
      if (neg) i_++;
      if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') bad("bad number");
      int64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (v > (INT64_MAX - 9) / 10) bad("number too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) bad("non-integer number");
      j.num = neg ? -v : v;
      return j;
    }
    for (const char *lit : {"true", "false", "null"}) {
      size_t n = std::strlen(lit);
      if (s_.compare(i_, n, lit) == 0) { i_ += n; return j; }
    }
    bad("unexpected value");
  }
  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) bad("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') { out += c; continue; }
      if (i_ >= s_.size()) bad("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) bad("short \\u escape");
          unsigned cp = (unsigned)std::stoul(s_.substr(i_, 4), nullptr, 16);
          i_ += 4;
          // UTF-8 of a BMP code point (surrogate pairs are kept as two 3-byte sequences)
          if (cp < 0x80) out += (char)cp;
          else if (cp < 0x800) { out += (char)(0xC0 | (cp >> 6)); out += (char)(0x80 | (cp & 0x3F)); }
          else {
            out += (char)(0xE0 | (cp >> 12));
            out += (char)(0x80 | ((cp >> 6) & 0x3F));
            out += (char)(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: bad("bad escape");
      }
    }
  }
  const std::string &s_;
  const std::string &path_;
  size_t i_ = 0;
};

std::string json_escape(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += (char)c; }
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); out += b; }
    else out += (char)c;
  }
  return out + "\"";
}

struct FileCloser {
  void operator()(FILE *f) const { if (f) std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

FilePtr open_or_fail(const std::string &path, const char *mode) {
  FILE *f = std::fopen(path.c_str(), mode);
  if (!f) fail(Code::IO, "%s: cannot open: %s", path.c_str(), std::strerror(errno));
  return FilePtr(f);
}

}  // namespace

File read_header(const std::string &path) {
  FilePtr f = open_or_fail(path, "rb");
  unsigned char len8[8];
  if (std::fread(len8, 1, 8, f.get()) != 8) fail(Code::IO, "%s: truncated: no 8-byte header length", path.c_str());
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | len8[k];
  if (std::fseek(f.get(), 0, SEEK_END) != 0) fail(Code::IO, "%s: cannot seek", path.c_str());
  long fsize = std::ftell(f.get());
  if (fsize < 8 || hlen > (uint64_t)(fsize - 8) || hlen > (100u << 20))
    fail(Code::IO, "%s: header length %llu does not fit a file of %ld bytes", path.c_str(), (unsigned long long)hlen,
         fsize);
  std::string text((size_t)hlen, '\0');
  std::fseek(f.get(), 8, SEEK_SET);
  if (hlen && std::fread(&text[0], 1, (size_t)hlen, f.get()) != hlen)
    fail(Code::IO, "%s: truncated header", path.c_str());
  Json root = Parser(text, path).parse();
  if (root.kind != Json::OBJECT) fail(Code::IO, "%s: the header is not a JSON object", path.c_str());
  File file;
  file.path = path;
  file.data_start = 8 + (int64_t)hlen;
  int64_t data_size = fsize - file.data_start;
  for (auto &kv : root.fields) {
    if (kv.first == "__metadata__") {
      if (kv.second.kind != Json::OBJECT) fail(Code::IO, "%s: __metadata__ is not an object", path.c_str());
      for (auto &m : kv.second.fields) {
        if (m.second.kind != Json::STRING) fail(Code::IO, "%s: metadata value of %s is not a string", path.c_str(), m.first.c_str());
        file.metadata[m.first] = m.second.str;
      }
      continue;
    }
    const Json &e = kv.second;
    const Json *dt = nullptr, *shape = nullptr, *offs = nullptr;
    if (e.kind == Json::OBJECT)
      for (auto &f2 : e.fields) {
        if (f2.first == "dtype") dt = &f2.second;
        else if (f2.first == "shape") shape = &f2.second;
        else if (f2.first == "data_offsets") offs = &f2.second;
      }
    if (!dt || dt->kind != Json::STRING || !shape || shape->kind != Json::ARRAY || !offs ||
        offs->kind != Json::ARRAY || offs->items.size() != 2)
      fail(Code::IO, "%s: entry %s lacks dtype, shape or data_offsets", path.c_str(), kv.first.c_str());
    Entry en;
    en.name = kv.first;
    bool known = false;
    for (auto &d : kDtypes)
      if (dt->str == d.name) { en.dtype = d.dtype; known = true; }
    if (!known) fail(Code::IO, "%s: entry %s has dtype %s, which minitorch does not read", path.c_str(), kv.first.c_str(), dt->str.c_str());
    for (auto &d : shape->items) {
      if (d.kind != Json::NUMBER || d.num < 0) fail(Code::IO, "%s: entry %s has a bad shape", path.c_str(), kv.first.c_str());
      en.shape.push_back(d.num);
    }
    if (en.shape.size() > (size_t)kMaxDims) fail(Code::IO, "%s: entry %s has %zu dims (at most %d)", path.c_str(), kv.first.c_str(), en.shape.size(), kMaxDims);
    if (!shape_fits(en.shape))
      fail(Code::IO, "%s: entry %s has shape %s, whose element count exceeds 2^60", path.c_str(), kv.first.c_str(),
           shape_str(en.shape).c_str());
    if (offs->items[0].kind != Json::NUMBER || offs->items[1].kind != Json::NUMBER)
      fail(Code::IO, "%s: entry %s has bad data_offsets", path.c_str(), kv.first.c_str());
    en.begin = offs->items[0].num;
    en.end = offs->items[1].num;
    int64_t want = shape_numel(en.shape) * dtype_size(en.dtype);
    if (en.begin < 0 || en.end < en.begin || en.end > data_size || en.end - en.begin != want)
      fail(Code::IO, "%s: entry %s: data_offsets [%lld, %lld] do not hold %s %s (%lld bytes) within %lld data bytes",
           path.c_str(), kv.first.c_str(), (long long)en.begin, (long long)en.end, dtype_name(en.dtype),
           shape_str(en.shape).c_str(), (long long)want, (long long)data_size);
    file.entries.push_back(std::move(en));
  }
  return file;
}

void save(const std::string &path, const std::vector<std::pair<std::string, Ref>> &tensors,
          const std::map<std::string, std::string> &metadata) {
  std::string header = "{";
  int64_t off = 0;
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool mf = true;
    for (auto &kv : metadata) {
      header += (mf ? "" : ",") + json_escape(kv.first) + ":" + json_escape(kv.second);
      mf = false;
    }
    header += "}";
    first = false;
  }
  for (size_t i = 0; i < tensors.size(); i++) {
    const std::string &name = tensors[i].first;
    MT_CHECK(!name.empty() && name != "__metadata__", INVALID_ARGUMENT, "names[%zu] is empty or reserved", i);
    for (size_t j = 0; j < i; j++)
      MT_CHECK(tensors[j].first != name, INVALID_ARGUMENT, "name %s appears twice (names[%zu] and names[%zu])",
               name.c_str(), j, i);
    const Ref &t = tensors[i].second;
    std::string shape = "[";
    for (size_t k = 0; k < t->shape.size(); k++) shape += (k ? "," : "") + std::to_string(t->shape[k]);
    shape += "]";
    header += std::string(first ? "" : ",") + json_escape(name) + ":{\"dtype\":\"" + dtype_tag(t->dtype) +
              "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(off) + "," +
              std::to_string(off + t->nbytes()) + "]}";
    first = false;
    off += t->nbytes();
  }
  header += "}";
  while ((8 + header.size()) % 8) header += ' ';  // the data section starts 8-byte aligned
  std::string tmp = path + ".tmp";
  {
    FilePtr f = open_or_fail(tmp, "wb");
    unsigned char len8[8];
    uint64_t hl = header.size();
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)(hl >> (8 * k));
    bool ok = std::fwrite(len8, 1, 8, f.get()) == 8 && std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
    std::vector<char> buf;
    for (size_t i = 0; ok && i < tensors.size(); i++) {
      const Ref &t = tensors[i].second;
      buf.resize((size_t)t->nbytes());
      if (t->nbytes()) t->backend().copy_to_host(buf.data(), t->data(), t->nbytes());
      ok = std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size();
    }
    if (!ok || std::fflush(f.get()) != 0) {
      int err = errno;
      f.reset();
      std::remove(tmp.c_str());
      fail(Code::IO, "%s: write failed: %s", tmp.c_str(), std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail(Code::IO, "%s: cannot replace: %s", path.c_str(), std::strerror(err));
  }
}

Ref load(const File &file, const std::string &name, Device device) {
  for (const Entry &e : file.entries) {
    if (e.name != name) continue;
    FilePtr f = open_or_fail(file.path, "rb");
    std::vector<char> buf((size_t)(e.end - e.begin));
    if (std::fseek(f.get(), (long)(file.data_start + e.begin), SEEK_SET) != 0 ||
        (!buf.empty() && std::fread(buf.data(), 1, buf.size(), f.get()) != buf.size()))
      fail(Code::IO, "%s: entry %s: truncated data", file.path.c_str(), name.c_str());
    return ops::from_host(buf.data(), e.shape, e.dtype, device);
  }
  fail(Code::IO, "%s: no tensor named %s", file.path.c_str(), name.c_str());
}

}  // namespace st
}  // namespace mt
