# A CTest script, included after the discovered tests are defined (tests/CMakeLists.txt appends it
# to TEST_INCLUDE_FILES after the modules): every test of CUDA or NCCL code, i.e. the suites
# named Cuda*, PinnedHost* and Nccl* (parameterized ones as <instance>/Nccl*), gets the label
# "gpu" besides "unit". `ctest -L gpu` on a GPU machine runs exactly them; where no GPU is visible
# they still run under "unit" and skip with the reason.
foreach(hoist_gpu_test IN LISTS test_core_TESTS test_comm_TESTS test_kernels_cuda_TESTS
                              test_runtime_cuda_TESTS)
  if(hoist_gpu_test MATCHES "(^|/)(Cuda|PinnedHost|Nccl)")
    set_tests_properties("${hoist_gpu_test}" PROPERTIES LABELS "unit;gpu")
  endif()
endforeach()
