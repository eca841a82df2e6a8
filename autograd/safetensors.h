// safetensors.h - the safetensors file format (the one Hugging Face and PyTorch
// users exchange weights in): 8 bytes of little-endian header length, a JSON header
// mapping each name to {dtype, shape, data_offsets} (plus optional "__metadata__", a
// string-to-string map), then the raw little-endian tensor bytes.
//
// defines: st::Entry, st::File, st::read_header, st::save, st::load
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor.h"

namespace mt {
namespace st {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct File {
  std::string path;
  std::vector<Entry> entries;  // in file order (ascending data offset)
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;      // absolute offset of the data section
};

// Parses and validates the header (offsets within the file, sizes matching dtype and
// shape). Throws Error(IO) naming the path and the problem.
File read_header(const std::string &path);
// Writes the tensors (copied to the host) with optional metadata; replaces path.
void save(const std::string &path, const std::vector<std::pair<std::string, Ref>> &tensors,
          const std::map<std::string, std::string> &metadata = {});
// Loads one entry onto device.
Ref load(const File &file, const std::string &name, Device device);

}  // namespace st
}  // namespace mt
