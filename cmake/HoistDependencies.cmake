# Required dependencies (Debian packages listed in scripts/install-deps) and the optional parts.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  find_path(HOIST_CLI11_INCLUDE CLI/CLI.hpp REQUIRED)
endif()

# BLAS: OpenBLAS's CBLAS interface, the OpenMP build where it is installed. hoist's kernels run
# on the OpenMP thread team; OpenBLAS's pthread build brings a second team that competes with it
# for the cores between GEMMs (measured on 2 cores: a small model's step took 2x as long).
find_path(HOIST_CBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
find_library(HOIST_OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
if(NOT HOIST_CBLAS_INCLUDE OR NOT HOIST_OPENBLAS_LIBRARY)
  message(STATUS "hoist: OpenBLAS's OpenMP build not found (libopenblas-openmp-dev); using the default one")
  find_path(HOIST_CBLAS_INCLUDE cblas.h
    PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas REQUIRED)
  find_library(HOIST_OPENBLAS_LIBRARY NAMES openblas REQUIRED)
endif()
add_library(hoist_blas INTERFACE)
target_include_directories(hoist_blas INTERFACE ${HOIST_CBLAS_INCLUDE})
target_link_libraries(hoist_blas INTERFACE ${HOIST_OPENBLAS_LIBRARY})
# The OpenMP build is not the system default (update-alternatives points at the pthread one), so
# binaries must find it by their run path.
get_filename_component(HOIST_OPENBLAS_DIR ${HOIST_OPENBLAS_LIBRARY} DIRECTORY)
target_link_options(hoist_blas INTERFACE "LINKER:-rpath,${HOIST_OPENBLAS_DIR}")

find_path(HOIST_XXHASH_INCLUDE xxhash.h REQUIRED)
find_library(HOIST_XXHASH_LIBRARY NAMES xxhash REQUIRED)
add_library(hoist_xxhash INTERFACE)
target_include_directories(hoist_xxhash INTERFACE ${HOIST_XXHASH_INCLUDE})
target_link_libraries(hoist_xxhash INTERFACE ${HOIST_XXHASH_LIBRARY})

# Compressed datasets (runtime/data/byte_stream.h): gzip through zlib, zstd through libzstd.
find_package(ZLIB REQUIRED)
find_path(HOIST_ZSTD_INCLUDE zstd.h REQUIRED)
find_library(HOIST_ZSTD_LIBRARY NAMES zstd REQUIRED)
add_library(hoist_compression INTERFACE)
target_include_directories(hoist_compression INTERFACE ${HOIST_ZSTD_INCLUDE})
target_link_libraries(hoist_compression INTERFACE ZLIB::ZLIB ${HOIST_ZSTD_LIBRARY})

# --- CUDA: compiles wherever nvcc exists, even without a GPU to run on. ---
hoist_wants(CUDA want_cuda)
set(cuda_found FALSE)
if(want_cuda)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(cuda_found TRUE)
    endif()
  endif()
endif()
hoist_resolve(CUDA "${cuda_found}" "nvcc ${CMAKE_CUDA_COMPILER_VERSION}")

# --- NCCL (needs CUDA) ---
hoist_wants(NCCL want_nccl)
set(nccl_found FALSE)
if(want_nccl AND HOIST_HAVE_CUDA)
  find_path(HOIST_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(HOIST_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(HOIST_NCCL_INCLUDE AND HOIST_NCCL_LIBRARY)
    set(nccl_found TRUE)
  endif()
endif()
hoist_resolve(NCCL "${nccl_found}" "libnccl")

# --- MPI ---
hoist_wants(MPI want_mpi)
set(mpi_found FALSE)
if(want_mpi)
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(mpi_found TRUE)
  endif()
endif()
hoist_resolve(MPI "${mpi_found}" "MPI ${MPI_CXX_VERSION}")

# --- io_uring ---
hoist_wants(URING want_uring)
set(uring_found FALSE)
if(want_uring)
  find_path(HOIST_URING_INCLUDE liburing.h)
  find_library(HOIST_URING_LIBRARY uring)
  if(HOIST_URING_INCLUDE AND HOIST_URING_LIBRARY)
    set(uring_found TRUE)
  endif()
endif()
hoist_resolve(URING "${uring_found}" "liburing")

# --- oneDNN: the bf16 matmuls (kernels/cpu/gemm_bf16.h). Found by header and library rather
# than its CMake package, whose config also looks for OpenCL (Debian builds it with a GPU runtime
# that hoist does not use). ---
hoist_wants(DNNL want_dnnl)
set(dnnl_found FALSE)
set(dnnl_what "oneDNN (libdnnl-dev)")
if(want_dnnl)
  find_path(HOIST_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp)
  find_library(HOIST_DNNL_LIBRARY dnnl)
  if(HOIST_DNNL_INCLUDE AND HOIST_DNNL_LIBRARY)
    set(dnnl_found TRUE)
    file(STRINGS ${HOIST_DNNL_INCLUDE}/oneapi/dnnl/dnnl_version.h dnnl_version_lines
         REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
           dnnl_version "${dnnl_version_lines}")
    set(dnnl_what "oneDNN ${dnnl_version}")
    add_library(hoist_dnnl INTERFACE)
    target_include_directories(hoist_dnnl INTERFACE ${HOIST_DNNL_INCLUDE})
    target_link_libraries(hoist_dnnl INTERFACE ${HOIST_DNNL_LIBRARY})
  endif()
endif()
hoist_resolve(DNNL "${dnnl_found}" "${dnnl_what}")

# --- gRPC ---
hoist_wants(GRPC want_grpc)
set(grpc_found FALSE)
if(want_grpc)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(HOIST_GRPCPP QUIET IMPORTED_TARGET grpc++)
  endif()
  find_program(HOIST_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  find_program(HOIST_PROTOC protoc)
  if(HOIST_GRPCPP_FOUND AND HOIST_GRPC_CPP_PLUGIN AND HOIST_PROTOC)
    set(grpc_found TRUE)
  endif()
endif()
hoist_resolve(GRPC "${grpc_found}" "grpc++ ${HOIST_GRPCPP_VERSION} with protoc and grpc_cpp_plugin")

# --- Prometheus ---
hoist_wants(PROMETHEUS want_prom)
set(prom_found FALSE)
if(want_prom)
  find_package(prometheus-cpp CONFIG QUIET)
  if(prometheus-cpp_FOUND)
    set(prom_found TRUE)
  endif()
endif()
hoist_resolve(PROMETHEUS "${prom_found}" "prometheus-cpp ${prometheus-cpp_VERSION}")
