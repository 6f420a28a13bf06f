#!/bin/sh
# Builds ggml, llama.cpp's CPU library, for the benchmarks' ggml peer and installs it into PREFIX
# (headers, static libraries and the CMake package that bench/CMakeLists.txt finds):
#
#     bench/build-ggml.sh PREFIX PIP [VERSION]
#
# The source is the llama.cpp that PyPI's llama-cpp-python VERSION carries (its source
# distribution, fetched with PIP). ggml is configured as llama.cpp configures it for the host:
# native instructions and llamafile's sgemm, with ggml's own thread pool rather than OpenMP.
set -eu
prefix=$1
pip=$2
version=${3:-0.3.36}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$pip" download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp/ggml)
# The source distribution leaves out the pkg-config template that ggml's configuration writes.
[ -f "$src/ggml.pc.in" ] || : >"$src/ggml.pc.in"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON -DGGML_OPENMP=OFF \
  -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >"$work/configure.log"
cmake --build "$work/build" >"$work/build.log"
cmake --install "$work/build" >/dev/null
echo "ggml of llama-cpp-python $version installed in $prefix"
