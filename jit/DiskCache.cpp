// The disk kernel cache: settings, entry format, atomic writes, validation and LRU eviction.
#include "DiskCache.h"

#include "BuildFingerprint.h"

#include <fmt/format.h>
#include <llvm/ADT/ScopeExit.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/Endian.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/Path.h>
#include <llvm/Support/Process.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Support/xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <limits>
#include <set>
#include <unistd.h>

namespace frank::jit {

namespace fs = llvm::sys::fs;
namespace endian = llvm::support::endian;

namespace {

constexpr std::string_view kSuffix = ".kernel";
constexpr std::string_view kTempInfix = ".kernel.tmp-";
// A temporary file this old belongs to a writer that died; younger ones may still be written.
constexpr auto kStaleTemp = std::chrono::hours(1);

std::string getEnv(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

/// Prints `message` once per process: a misconfiguration reads as one line, not one per kernel.
void warnOnce(const std::string &message) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(message).second)
    fmt::print(stderr, "frank-jit: warning: {}\n", message);
}

void reportDiscarded(const std::string &path, const std::string &reason) {
  fmt::print(stderr, "frank-jit: warning: discarding corrupt cache entry {}: {}\n", path, reason);
}

/// "123", "512K", "64M", "1G" (also KiB, MiB, GiB): powers of 1024.
std::optional<uint64_t> parseBytes(const std::string &text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0 || digits > 15)
    return std::nullopt;
  uint64_t value = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char &c : unit)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (unit == "" || unit == "B")
    shift = 0;
  else if (unit == "K" || unit == "KIB")
    shift = 10;
  else if (unit == "M" || unit == "MIB")
    shift = 20;
  else if (unit == "G" || unit == "GIB")
    shift = 30;
  else
    return std::nullopt;
  // A count whose bytes do not fit 64 bits is no count (17179869184G shifted to 0).
  if (value == 0 || value > (std::numeric_limits<uint64_t>::max() >> shift))
    return std::nullopt;
  return value << shift;
}

bool isEntryName(llvm::StringRef name) {
  return name.size() == 32 + kSuffix.size() && name.ends_with(kSuffix) &&
         DiskCacheKey::fromHex(name.substr(0, 32).str()).has_value();
}

bool isTempName(llvm::StringRef name) { return name.contains(kTempInfix); }

struct ParsedEntry {
  DiskCacheKey key;
  llvm::StringRef description, object;
};

/// Why `bytes` is not a whole, intact entry (for `expected`, if given); empty if it is.
std::string parseEntry(llvm::StringRef bytes, const DiskCacheKey *expected, ParsedEntry &out) {
  if (bytes.size() < entry::kHeaderBytes)
    return fmt::format("truncated ({} bytes, shorter than the {}-byte header)", bytes.size(),
                       entry::kHeaderBytes);
  const char *p = bytes.data();
  if (!std::equal(std::begin(entry::kMagic), std::end(entry::kMagic), p))
    return "not a frank-jit cache entry (bad magic)";
  uint32_t schema = endian::read32le(p + entry::kSchemaOffset);
  if (schema != kDiskCacheSchema)
    return fmt::format("schema {}, but this build reads schema {}", schema, kDiskCacheSchema);
  uint32_t descriptionBytes = endian::read32le(p + entry::kDescriptionOffset);
  uint64_t objectBytes = endian::read64le(p + entry::kPayloadSizeOffset);
  if (descriptionBytes > entry::kMaxDescriptionBytes || objectBytes > (uint64_t{1} << 40))
    return "bad header (impossible sizes)";
  out.key.low = endian::read64le(p + entry::kKeyOffset);
  out.key.high = endian::read64le(p + entry::kKeyOffset + 8);
  if (expected && !(out.key == *expected))
    return fmt::format("it holds key {}", out.key.hex());
  uint64_t want = entry::kHeaderBytes + descriptionBytes + objectBytes;
  if (bytes.size() < want)
    return fmt::format("truncated ({} of {} bytes)", bytes.size(), want);
  if (bytes.size() > want)
    return fmt::format("{} bytes past the end of the entry", bytes.size() - want);
  llvm::StringRef body = bytes.drop_front(entry::kHeaderBytes);
  if (llvm::xxh3_64bits(body) != endian::read64le(p + entry::kChecksumOffset))
    return "checksum mismatch";
  out.description = body.take_front(descriptionBytes);
  out.object = body.drop_front(descriptionBytes);
  return "";
}

/// Reads a file whole, without mapping it: a file truncated under a mapping would fault.
llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> readWhole(int fd, const std::string &path) {
  return llvm::MemoryBuffer::getOpenFile(fs::convertFDToNativeFile(fd), path, -1,
                                         /*RequiresNullTerminator=*/false, /*IsVolatile=*/true);
}

} // namespace

// ---- Keys and settings -------------------------------------------------------------------------

std::string DiskCacheKey::hex() const { return fmt::format("{:016x}{:016x}", high, low); }

std::optional<DiskCacheKey> DiskCacheKey::fromHex(std::string_view text) {
  if (text.size() != 32 || text.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return std::nullopt;
  DiskCacheKey key;
  key.high = std::stoull(std::string(text.substr(0, 16)), nullptr, 16);
  key.low = std::stoull(std::string(text.substr(16)), nullptr, 16);
  return key;
}

DiskCacheKey diskCacheKey(const std::vector<std::string_view> &parts) {
  std::string text =
      fmt::format("frank-jit disk cache schema {}\nfrank-jit {}\nLLVM {}\nbuild {}\n",
                  kDiskCacheSchema, FRANK_VERSION, LLVM_VERSION_STRING, FRANK_BUILD_FINGERPRINT);
  for (std::string_view part : parts)
    text += fmt::format("{}:{}\n", part.size(), part);
  llvm::XXH128_hash_t hash = llvm::xxh3_128bits(
      llvm::ArrayRef(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
  return {hash.low64, hash.high64};
}

DiskCacheSettings resolveDiskCacheSettings(std::optional<bool> enable, const std::string &directory,
                                           uint64_t maxBytes) {
  DiskCacheSettings s;
  std::string dir = directory;
  if (dir.empty())
    dir = getEnv("FRANK_CACHE_DIR");
  if (dir.empty()) {
    // XDG: a relative XDG_CACHE_HOME is invalid and ignored.
    std::string xdg = getEnv("XDG_CACHE_HOME");
    std::string home = getEnv("HOME");
    if (!xdg.empty() && llvm::sys::path::is_absolute(xdg))
      dir = fmt::format("{}/frank-jit", xdg);
    else if (!home.empty())
      dir = fmt::format("{}/.cache/frank-jit", home);
  }
  if (!dir.empty()) {
    llvm::SmallString<256> absolute(dir);
    fs::make_absolute(absolute);
    llvm::sys::path::remove_dots(absolute, /*remove_dot_dot=*/true);
    s.directory = std::string(absolute);
  }

  s.maxBytes = maxBytes;
  if (s.maxBytes == 0) {
    std::string cap = getEnv("FRANK_CACHE_MAX_BYTES");
    std::optional<uint64_t> parsed = cap.empty() ? std::nullopt : parseBytes(cap);
    if (!cap.empty() && !parsed)
      warnOnce(fmt::format("ignoring FRANK_CACHE_MAX_BYTES='{}': expected a positive byte "
                           "count such as 536870912 or 512M",
                           cap));
    s.maxBytes = parsed.value_or(kDefaultDiskCacheBytes);
  }

  s.enabled = true;
  s.status = "enabled";
  if (enable.has_value()) {
    s.enabled = *enable;
    if (!s.enabled)
      s.status = "disabled by the caller (--no-disk-cache or ContextOptions::diskCache)";
  } else if (std::string value = getEnv("FRANK_CACHE"); !value.empty()) {
    const std::string word = llvm::StringRef(value).lower();
    if (word == "off" || word == "0" || word == "false" || word == "no") {
      s.enabled = false;
      s.status = fmt::format("disabled by FRANK_CACHE={}", value);
    } else if (word != "on" && word != "1" && word != "true" && word != "yes") {
      warnOnce(fmt::format("ignoring FRANK_CACHE='{}': expected on or off", value));
    }
  }
  if (s.enabled && s.directory.empty()) {
    s.enabled = false;
    s.status = "disabled: no directory (set FRANK_CACHE_DIR, XDG_CACHE_HOME or HOME)";
  }
  return s;
}

std::string checkCacheDirectory(const std::string &directory) {
  fs::file_status st;
  if (std::error_code ec = fs::status(directory, st)) {
    if (ec == std::errc::no_such_file_or_directory)
      return "";
    return fmt::format("cannot inspect it: {}", ec.message());
  }
  if (st.type() != fs::file_type::directory_file)
    return "it is not a directory";
  unsigned uid = ::geteuid();
  if (st.getUser() != uid)
    return fmt::format("it is owned by uid {}, not by you (uid {})", st.getUser(), uid);
  if (st.permissions() & (fs::group_write | fs::others_write))
    return fmt::format("it is writable by its group or by others (chmod go-w {})", directory);
  return "";
}

// ---- The cache ---------------------------------------------------------------------------------

DiskCache::DiskCache(std::string directory, uint64_t maxBytes)
    : directory_(std::move(directory)), maxBytes_(maxBytes) {}

std::string DiskCache::pathOf(const DiskCacheKey &key) const {
  return fmt::format("{}/{}{}", directory_, key.hex(), kSuffix);
}

bool DiskCache::ready() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == State::Refused)
    return false;
  std::string problem;
  // Checked again at every use: the directory may have changed hands or modes since (a kernel
  // had been loaded from a directory made writable by others after the first check).
  if (state_ == State::Ready) {
    problem = checkCacheDirectory(directory_);
    if (problem.empty())
      return true;
    warnOnce(fmt::format("no longer using the kernel cache in {}: {}", directory_, problem));
    state_ = State::Refused;
    return false;
  }
  if (!fs::exists(directory_)) {
    // Missing parents too ($HOME/.cache); the cache itself is private to the user.
    if (std::error_code ec = fs::create_directories(directory_, true, fs::owner_all))
      problem = fmt::format("cannot create it: {}", ec.message());
    else if (std::error_code ec = fs::setPermissions(directory_, fs::owner_all))
      problem = fmt::format("cannot set its permissions: {}", ec.message());
  }
  if (problem.empty())
    problem = checkCacheDirectory(directory_);
  if (!problem.empty()) {
    warnOnce(fmt::format("not using the kernel cache in {}: {}", directory_, problem));
    state_ = State::Refused;
    return false;
  }
  state_ = State::Ready;
  return true;
}

std::optional<std::string> DiskCache::load(const DiskCacheKey &key) {
  if (!ready())
    return std::nullopt;
  std::string path = pathOf(key);
  // Not through a link, and without waiting for a writer: an entry that is a FIFO would block
  // the open, and a link to a device would be read without end.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && errno != ELOOP)
    return std::nullopt; // no entry (or none we may read; a store will replace it)
  auto closeFd = llvm::make_scope_exit([&] {
    if (fd >= 0)
      llvm::sys::Process::SafelyCloseFileDescriptor(fd);
  });
  fs::file_status st;
  std::string problem;
  ParsedEntry parsed;
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      std::make_error_code(std::errc::io_error);
  if (fd < 0 || fs::status(fd, st) || st.type() != fs::file_type::regular_file)
    problem = "it is not a regular file";
  else if (st.getUser() != ::geteuid())
    problem = fmt::format("it is owned by uid {}, not by you", st.getUser());
  else if (st.permissions() & (fs::group_write | fs::others_write))
    problem = "it is writable by its group or by others";
  else if (!(buffer = readWhole(fd, path)))
    problem = fmt::format("cannot read it: {}", buffer.getError().message());
  else
    problem = parseEntry((*buffer)->getBuffer(), &key, parsed);
  if (!problem.empty()) {
    reportDiscarded(path, problem);
    fs::remove(path);
    return std::nullopt;
  }
  // Recently used: eviction goes by mtime. Failing to touch only makes eviction less exact.
  (void)fs::setLastAccessAndModificationTime(fd, std::chrono::system_clock::now());
  return parsed.object.str();
}

bool DiskCache::store(const DiskCacheKey &key, std::string_view description,
                      std::string_view object) {
  if (!ready())
    return false;
  std::string path = pathOf(key);
  if (description.size() > entry::kMaxDescriptionBytes)
    description = description.substr(0, entry::kMaxDescriptionBytes);
  std::string body;
  body.reserve(description.size() + object.size());
  body.append(description).append(object);
  char header[entry::kHeaderBytes] = {};
  std::copy(std::begin(entry::kMagic), std::end(entry::kMagic), header);
  endian::write32le(header + entry::kSchemaOffset, kDiskCacheSchema);
  endian::write32le(header + entry::kDescriptionOffset, static_cast<uint32_t>(description.size()));
  endian::write64le(header + entry::kKeyOffset, key.low);
  endian::write64le(header + entry::kKeyOffset + 8, key.high);
  endian::write64le(header + entry::kPayloadSizeOffset, object.size());
  endian::write64le(header + entry::kChecksumOffset, llvm::xxh3_64bits(body));

  // A unique temporary file beside the entry, renamed over it: readers never see a partial
  // entry, and concurrent writers of the same kernel each rename a whole one.
  llvm::SmallString<256> temp;
  int fd = -1;
  std::error_code ec = fs::createUniqueFile(fmt::format("{}.tmp-%%%%%%%%", path), fd, temp,
                                            fs::OF_None, fs::owner_read | fs::owner_write);
  if (!ec) {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os.write(header, sizeof header);
    os.write(body.data(), body.size());
    os.close();
    if (os.has_error()) {
      ec = os.error();
      os.clear_error();
    }
    if (!ec)
      ec = fs::rename(temp, path);
    if (ec)
      fs::remove(temp);
  }
  if (ec) {
    warnOnce(fmt::format("cannot write cache entry {}: {}", path, ec.message()));
    return false;
  }
  evict();
  return true;
}

void DiskCache::discard(const DiskCacheKey &key, const std::string &reason) {
  std::string path = pathOf(key);
  reportDiscarded(path, reason);
  fs::remove(path);
}

std::vector<DiskCacheEntry> DiskCache::list() const {
  std::vector<DiskCacheEntry> entries;
  std::error_code ec;
  // Links are not followed: an entry is a regular file of the directory.
  for (fs::directory_iterator it(directory_, ec, /*FollowSymlinks=*/false), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (!isEntryName(name))
      continue;
    auto st = it->status();
    if (!st || st->type() != fs::file_type::regular_file)
      continue;
    DiskCacheEntry e;
    e.path = it->path();
    e.key = *DiskCacheKey::fromHex(name.substr(0, 32).str());
    e.bytes = st->getSize();
    e.lastUsed = std::chrono::duration_cast<std::chrono::seconds>(
                     st->getLastModificationTime().time_since_epoch())
                     .count();
    auto buffer = llvm::MemoryBuffer::getFile(e.path, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false,
                                              /*IsVolatile=*/true);
    ParsedEntry parsed;
    if (!buffer)
      e.problem = fmt::format("cannot read it: {}", buffer.getError().message());
    else
      e.problem = parseEntry((*buffer)->getBuffer(), &e.key, parsed);
    if (e.problem.empty())
      e.description = parsed.description.str();
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const DiskCacheEntry &a, const DiskCacheEntry &b) {
    return a.lastUsed != b.lastUsed ? a.lastUsed < b.lastUsed : a.path < b.path;
  });
  return entries;
}

size_t DiskCache::clear() {
  size_t removed = 0;
  std::error_code ec;
  // Everything named like an entry goes; only regular files count, as `list` shows only them.
  std::vector<std::pair<std::string, bool>> paths; // path, counted
  for (fs::directory_iterator it(directory_, ec, /*FollowSymlinks=*/false), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (!isEntryName(name) && !isTempName(name))
      continue;
    auto st = it->status();
    paths.emplace_back(it->path(),
                       isEntryName(name) && st && st->type() == fs::file_type::regular_file);
  }
  for (const auto &[path, counted] : paths)
    if (!fs::remove(path, /*IgnoreNonExisting=*/false) && counted)
      ++removed;
  return removed;
}

void DiskCache::evict() {
  struct Item {
    std::string path;
    uint64_t bytes;
    llvm::sys::TimePoint<> used;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  auto now = std::chrono::system_clock::now();
  std::error_code ec;
  for (fs::directory_iterator it(directory_, ec), end; !ec && it != end; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    bool entry = isEntryName(name);
    if (!entry && !isTempName(name))
      continue;
    auto st = it->status();
    if (!st || st->type() != fs::file_type::regular_file)
      continue;
    if (!entry) {
      if (now - st->getLastModificationTime() > kStaleTemp)
        fs::remove(it->path());
      continue;
    }
    items.push_back({it->path(), st->getSize(), st->getLastModificationTime()});
    total += st->getSize();
  }
  if (total <= maxBytes_)
    return;
  std::sort(items.begin(), items.end(), [](const Item &a, const Item &b) {
    return a.used != b.used ? a.used < b.used : a.path < b.path;
  });
  // Another process may be evicting too: an entry already gone counts as removed.
  for (const Item &item : items) {
    if (total <= maxBytes_)
      break;
    fs::remove(item.path);
    total -= item.bytes;
  }
}

} // namespace frank::jit
