// dlpack.h - the DLPack v0.8 structures (DLManagedTensor and what it holds), declared here
// so the library does not depend on an external header. Layout and values follow
// dlpack/include/dlpack/dlpack.h of DLPack v0.8 (https://github.com/dmlc/dlpack); only the
// names minitorch uses are spelled out. Private to abi/.
#pragma once

#include <stdint.h>

extern "C" {

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;  // DLDataTypeCode
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;            // for CUDA a device pointer; the first element is data + byte_offset
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;        // [ndim]
  int64_t *strides;      // [ndim] in elements, or NULL for compact row-major
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);  // called once by the consumer; may be NULL
} DLManagedTensor;

}  // extern "C"
