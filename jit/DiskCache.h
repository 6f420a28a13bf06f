// \file The disk kernel cache: the object file of every compiled kernel, kept in a directory
// across processes so that later ones load it instead of running LLVM's optimizer and code
// generator again.
//
// An entry is one file, `<key>.kernel`: a fixed header (magic, schema, key, sizes, checksum), a
// one-line description for `frank-jit cache ls`, then the kernel's objects (their count, then
// each one's size and bytes: a kernel compiled in parts has several). Entries are written to a
// temporary file in the same directory and renamed into place, so a reader sees a whole entry or
// none, and concurrent writers of one kernel both succeed. A file that does not check out is
// reported, removed and read as a miss. After each write the directory is trimmed to its size
// cap, least recently used entries first (the file's mtime, renewed on every hit).
//
// The directory holds machine code that the process runs: it is used only if the user owns it
// and nobody else can write to it. Checksums detect corruption, not tampering.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace frank::jit {

/// Bumped whenever the entry format or what a key covers changes.
constexpr uint32_t kDiskCacheSchema = 2;
/// The cap unless FRANK_CACHE_MAX_BYTES or ContextOptions say otherwise.
constexpr uint64_t kDefaultDiskCacheBytes = uint64_t{512} << 20;

/// The entry layout (little-endian): what tests need to build damaged entries.
namespace entry {
constexpr char kMagic[8] = {'F', 'R', 'A', 'N', 'K', 'O', 'B', 'J'};
constexpr size_t kSchemaOffset = 8;       // u32 schema
constexpr size_t kDescriptionOffset = 12; // u32 description bytes
constexpr size_t kKeyOffset = 16;         // 16 bytes: key low, key high
constexpr size_t kPayloadSizeOffset = 32; // u64 payload bytes (the objects)
constexpr size_t kChecksumOffset = 40;    // u64 xxh3 of everything after the header
constexpr size_t kHeaderBytes = 48;       // then the description, then the objects
constexpr size_t kMaxDescriptionBytes = 4096;
} // namespace entry

struct DiskCacheKey {
  uint64_t low = 0, high = 0;
  /// 32 hex digits: the stem of the entry's file name.
  std::string hex() const;
  static std::optional<DiskCacheKey> fromHex(std::string_view text);
  bool operator==(const DiskCacheKey &) const = default;
};

/// A 128-bit hash of `parts` (each length-prefixed, so no two lists collide by concatenation),
/// the schema, the frank-jit and LLVM versions and the build's source fingerprint.
DiskCacheKey diskCacheKey(const std::vector<std::string_view> &parts);

/// Where the cache lives and whether it is on. Explicit choices win over the environment:
/// FRANK_CACHE=off turns the cache off; the directory is FRANK_CACHE_DIR, else
/// $XDG_CACHE_HOME/frank-jit, else $HOME/.cache/frank-jit; FRANK_CACHE_MAX_BYTES sets the cap.
struct DiskCacheSettings {
  bool enabled = false;
  std::string directory; // absolute; empty if none could be determined
  uint64_t maxBytes = kDefaultDiskCacheBytes;
  std::string status; // "enabled", or why not
};
DiskCacheSettings resolveDiskCacheSettings(std::optional<bool> enable, const std::string &directory,
                                           uint64_t maxBytes);

/// Why `directory` may not hold the cache (not ours, writable by others, not a directory), or
/// empty if it may or does not exist yet. Creates nothing.
std::string checkCacheDirectory(const std::string &directory);

struct DiskCacheEntry {
  std::string path;
  DiskCacheKey key;
  uint64_t bytes = 0;
  int64_t lastUsed = 0;    // the file's mtime, seconds since the epoch
  std::string description; // "@rms_norm_linalg (specialized, 32x4096xf32, 4096xf32, f32)"
  std::string problem;     // why a load would discard it; empty if it is valid
};

class DiskCache {
public:
  DiskCache(std::string directory, uint64_t maxBytes);

  /// The object stored under `key`, or nothing. A damaged or foreign entry is reported on stderr,
  /// removed and read as missing. A hit marks the entry as recently used.
  std::optional<std::string> load(const DiskCacheKey &key);
  /// Writes the entry atomically, then trims the directory to the cap. False (after a warning)
  /// if it could not be written; the caller's kernel is unaffected.
  bool store(const DiskCacheKey &key, std::string_view description, std::string_view object);
  /// Reports and removes the entry under `key`: one that read back whole but that the JIT
  /// refused.
  void discard(const DiskCacheKey &key, const std::string &reason);

  /// Every entry, least recently used first. Only reads.
  std::vector<DiskCacheEntry> list() const;
  /// Removes every entry and leftover temporary file; returns how many entries.
  size_t clear();

  std::string pathOf(const DiskCacheKey &key) const;
  const std::string &directory() const { return directory_; }
  uint64_t maxBytes() const { return maxBytes_; }

private:
  /// Creates the directory (0700) on first use and checks that it is safe; false, after one
  /// warning per directory and process, if it is not.
  bool ready();
  void evict();

  std::string directory_;
  uint64_t maxBytes_;
  std::mutex mutex_;
  enum class State { Unchecked, Ready, Refused } state_ = State::Unchecked;
};

} // namespace frank::jit
