# Included by CMake right after llama.cpp's own project() call, inside llama.cpp's directory
# (setup/install.sh passes -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>).
# llama-cpp-python forces LLAMA_BUILD_COMMON=ON in the CMake cache, yet its Python package loads
# only libllama and libggml*: llama.cpp's common library (its HTTP client, chat-format parsers,
# command-line parsing) is compiled and never loaded. A normal variable hides the cached value
# here, so common/ and the HTTP library it needs are not built.
set(LLAMA_BUILD_COMMON OFF)
