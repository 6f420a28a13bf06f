// The disk kernel cache: entries, their validation and eviction (jit/DiskCache.h); kernels
// loaded by a later process instead of compiled; damaged entries discarded and recompiled;
// concurrent writers; the settings; `frank-jit cache`.
//
// The engine is process-wide and keeps every kernel it has linked, so a kernel is read from disk
// only in a process that has not made it yet: each test that needs a disk hit has the entry
// written by a frank-jit process, and uses shapes no other test in this file uses.
#include "DiskCache.h"
#include "TestSupport.h"
#include "ToolSupport.h"
#include "frank/Npy.h"
#include "oracles/Oracles.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/Path.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <sys/stat.h>
#include <unistd.h>

namespace frank::test {
namespace {

namespace fs = llvm::sys::fs;
using jit::DiskCache;
using jit::DiskCacheKey;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kRmsNorm = componentPath("normalization/rms_norm.mlir");
const std::string kMatmul = componentPath("linear/matmul.mlir");

/// A fresh directory per test, removed afterwards.
class TempDir {
public:
  TempDir() {
    llvm::SmallString<128> path;
    if (std::error_code ec = fs::createUniqueDirectory("frank-disk-cache-test", path))
      ADD_FAILURE() << "cannot create a temporary directory: " << ec.message();
    path_ = std::string(path);
  }
  ~TempDir() {
    // Undo what tests do to the directory's mode before removing it.
    fs::setPermissions(path_, fs::owner_all);
    fs::remove_directories(path_);
  }
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &leaf) const { return fmt::format("{}/{}", path_, leaf); }

private:
  std::string path_;
};

/// The names of the files in `dir`, sorted.
std::vector<std::string> filesIn(const std::string &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(std::string(llvm::sys::path::filename(it->path())));
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> entriesIn(const std::string &dir) {
  std::vector<std::string> entries;
  for (const std::string &name : filesIn(dir))
    if (llvm::StringRef(name).ends_with(".kernel"))
      entries.push_back(fmt::format("{}/{}", dir, name));
  return entries;
}

unsigned modeOf(const std::string &path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

ContextOptions diskCacheIn(const std::string &dir) {
  ContextOptions options;
  options.diskCache = true;
  options.cacheDir = dir;
  return options;
}

/// Sets an environment variable for one scope, restoring it afterwards.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

private:
  const char *name_;
  std::optional<std::string> old_;
};

// ---- rms_norm through the CLI and the API ------------------------------------------------------

/// Inputs for rms_norm at rows x cols, as tensors and as .npy files in `dir`.
struct RmsCase {
  int64_t rows, cols;
  std::vector<float> x, w;
  std::string xPath, wPath;

  RmsCase(const TempDir &dir, int64_t r, int64_t c) : rows(r), cols(c) {
    x = oracle::randomFloats(rows * cols, static_cast<uint64_t>(rows * 1000 + cols));
    w = oracle::randomFloats(cols, static_cast<uint64_t>(cols));
    xPath = dir / fmt::format("x{}x{}.npy", rows, cols);
    wPath = dir / fmt::format("w{}.npy", cols);
    writeNpy(xPath, Tensor::borrow(x.data(), DType::F32, {rows, cols}));
    writeNpy(wPath, Tensor::borrow(w.data(), DType::F32, {cols}));
  }
  std::vector<Arg> args() {
    return {Tensor::borrow(x.data(), DType::F32, {rows, cols}),
            Tensor::borrow(w.data(), DType::F32, {cols}), Scalar::f32(1e-6f)};
  }
  /// How `cache ls` and FRANK_DEBUG name the kernel for `cpu`.
  std::string description(const std::string &cpu = targetCpu()) const {
    return fmt::format("@rms_norm_linalg (specialized, {0}x{1}xf32, {1}xf32, f32) of "
                       "rms_norm.mlir for {2}",
                       rows, cols, cpu);
  }
  /// `frank-jit run` on these inputs with the disk cache in `cacheDir`, writing `output`.
  ToolResult run(const std::string &cacheDir, const std::string &output, EnvOverrides env = {},
                 const std::vector<std::string> &flags = {}) const {
    env.emplace("FRANK_CACHE", "on");
    env.emplace("FRANK_CACHE_DIR", cacheDir);
    std::vector<std::string> args{"run",
                                  kRmsNorm,
                                  "--function=rms_norm_linalg",
                                  fmt::format("--input={}x{}xf32=@{}", rows, cols, xPath),
                                  fmt::format("--input={}xf32=@{}", cols, wPath),
                                  "--input=f32=1e-6",
                                  "--output=@" + output};
    args.insert(args.end(), flags.begin(), flags.end());
    return runTool(args, env);
  }
  void expectMatchesOracle(const Tensor &y) {
    auto cmp = oracle::compare(y.as<float>(),
                               oracle::rmsNorm(x.data(), w.data(), 1e-6f, rows, cols), 1e-5, 1e-6);
    EXPECT_TRUE(cmp.ok) << cmp.describe();
  }
};

void expectBitIdentical(const Tensor &a, const Tensor &b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.byteSize(), b.byteSize());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.byteSize()), 0);
}

// ---- Entries -----------------------------------------------------------------------------------

DiskCacheKey keyOf(const std::string &text) { return jit::diskCacheKey({text}); }

TEST(DiskCacheEntries, StoreThenLoadReturnsTheObject) {
  TempDir dir;
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  DiskCacheKey key = keyOf("a");
  EXPECT_FALSE(cache.load(key).has_value());
  ASSERT_TRUE(cache.store(key, "@f (specialized, 4xf32)", std::string("obj\0ect", 7)));
  EXPECT_EQ(cache.load(key), std::string("obj\0ect", 7));
  EXPECT_EQ(filesIn(dir.path()), std::vector<std::string>{key.hex() + ".kernel"});
  EXPECT_EQ(modeOf(cache.pathOf(key)), 0600u);
  EXPECT_FALSE(cache.load(keyOf("b")).has_value());
  auto entries = cache.list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].description, "@f (specialized, 4xf32)");
  EXPECT_EQ(entries[0].problem, "");
  EXPECT_EQ(entries[0].bytes, jit::entry::kHeaderBytes + 23 + 7);
}

TEST(DiskCacheEntries, KeysCoverEveryPartAndItsBoundaries) {
  EXPECT_EQ(jit::diskCacheKey({"ab", "c"}), jit::diskCacheKey({"ab", "c"}));
  EXPECT_FALSE(jit::diskCacheKey({"ab", "c"}) == jit::diskCacheKey({"a", "bc"}));
  EXPECT_FALSE(jit::diskCacheKey({"ab"}) == jit::diskCacheKey({"ab", ""}));
  DiskCacheKey key = keyOf("x");
  EXPECT_EQ(key.hex().size(), 32u);
  EXPECT_EQ(DiskCacheKey::fromHex(key.hex()), key);
  EXPECT_FALSE(DiskCacheKey::fromHex("xyz").has_value());
}

TEST(DiskCacheEntries, DirectoryIsCreatedPrivate) {
  TempDir dir;
  std::string nested = dir / "a/b/frank-jit";
  DiskCache cache(nested, jit::kDefaultDiskCacheBytes);
  EXPECT_FALSE(fileExists(nested)); // nothing until first use
  ASSERT_TRUE(cache.store(keyOf("a"), "d", "o"));
  EXPECT_EQ(modeOf(nested), 0700u);
}

TEST(DiskCacheEntries, GroupWritableDirectoryIsRefused) {
  TempDir dir;
  ASSERT_FALSE(fs::setPermissions(dir.path(), fs::all_all));
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.store(keyOf("a"), "d", "o"));
  EXPECT_FALSE(cache.load(keyOf("a")).has_value());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, fmt::format("frank-jit: warning: not using the kernel cache in {}: it is "
                             "writable by its group or by others (chmod go-w {})\n",
                             dir.path(), dir.path()));
  EXPECT_TRUE(filesIn(dir.path()).empty());
}

// The directory is checked at every use, not only the first: one made writable by others
// since (where another user could have planted code) is no longer read nor written.
TEST(DiskCacheEntries, DirectoryMadeWritableLaterIsRefusedFromThen) {
  TempDir dir;
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  ASSERT_TRUE(cache.store(keyOf("a"), "d", "o"));
  ASSERT_TRUE(cache.load(keyOf("a")).has_value());
  ASSERT_FALSE(fs::setPermissions(dir.path(), fs::all_all));
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.load(keyOf("a")).has_value());
  EXPECT_FALSE(cache.store(keyOf("b"), "d", "o"));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, fmt::format("frank-jit: warning: no longer using the kernel cache in {}: it is "
                             "writable by its group or by others (chmod go-w {})\n",
                             dir.path(), dir.path()));
  EXPECT_EQ(filesIn(dir.path()), std::vector<std::string>{keyOf("a").hex() + ".kernel"});
}

// An entry others may write is discarded, as one of another owner is.
TEST(DiskCacheEntries, EntryWritableByOthersIsDiscarded) {
  TempDir dir;
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  ASSERT_TRUE(cache.store(keyOf("a"), "d", "o"));
  ASSERT_FALSE(fs::setPermissions(cache.pathOf(keyOf("a")), fs::all_read | fs::all_write));
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.load(keyOf("a")).has_value());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("it is writable by its group or by others")) << err;
  EXPECT_TRUE(filesIn(dir.path()).empty());
}

TEST(DiskCacheEntries, DirectoryOfAnotherUserIsRefused) {
  TempDir dir;
  std::string foreign = "/"; // root's, when not running as root
  if (::geteuid() == 0) {
    foreign = dir / "theirs";
    ASSERT_FALSE(fs::create_directory(foreign));
    ASSERT_EQ(::chown(foreign.c_str(), 65534, 65534), 0);
  }
  DiskCache cache(foreign, jit::kDefaultDiskCacheBytes);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.store(keyOf("a"), "d", "o"));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr(fmt::format("frank-jit: warning: not using the kernel cache in {}: "
                                         "it is owned by uid",
                                         foreign)));
  EXPECT_THAT(err, HasSubstr(fmt::format("not by you (uid {})", ::geteuid())));
  if (::geteuid() == 0) {
    EXPECT_TRUE(filesIn(foreign).empty());
  }
}

struct Damage {
  const char *name;
  std::function<void(std::string &entry)> apply;
  std::string reason; // after "discarding corrupt cache entry PATH: "
};

const std::vector<Damage> &damages() {
  static const std::vector<Damage> list = {
      {"Truncated", [](std::string &e) { e.resize(e.size() - 3); }, "truncated (74 of 77 bytes)"},
      {"TruncatedHeader", [](std::string &e) { e.resize(20); },
       "truncated (20 bytes, shorter than the 48-byte header)"},
      {"FlippedPayloadByte", [](std::string &e) { e.back() ^= 0x40; }, "checksum mismatch"},
      {"ForeignFile", [](std::string &e) { e = std::string(100, 'z'); },
       "not a frank-jit cache entry (bad magic)"},
      {"WrongSchema", [](std::string &e) { e[jit::entry::kSchemaOffset] += 1; },
       fmt::format("schema {}, but this build reads schema {}", jit::kDiskCacheSchema + 1,
                   jit::kDiskCacheSchema)},
      {"TrailingBytes", [](std::string &e) { e += "xx"; }, "2 bytes past the end of the entry"},
  };
  return list;
}

TEST(DiskCacheEntries, DamagedEntriesAreReportedAndRemoved) {
  for (const Damage &damage : damages()) {
    SCOPED_TRACE(damage.name);
    TempDir dir;
    DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
    DiskCacheKey key = keyOf(damage.name);
    ASSERT_TRUE(cache.store(key, "@f (x)", std::string(23, 'o')));
    std::string path = cache.pathOf(key);
    std::string bytes = readFile(path);
    ASSERT_EQ(bytes.size(), 77u);
    damage.apply(bytes);
    writeFile(path, bytes);
    ASSERT_EQ(cache.list().at(0).problem, damage.reason);
    testing::internal::CaptureStderr();
    EXPECT_FALSE(cache.load(key).has_value());
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              fmt::format("frank-jit: warning: discarding corrupt cache entry {}: {}\n", path,
                          damage.reason));
    EXPECT_FALSE(fileExists(path));
  }
}

TEST(DiskCacheEntries, EntryOfAnotherKeyIsRejected) {
  TempDir dir;
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  DiskCacheKey mine = keyOf("mine"), theirs = keyOf("theirs");
  ASSERT_TRUE(cache.store(theirs, "d", "o"));
  ASSERT_FALSE(fs::rename(cache.pathOf(theirs), cache.pathOf(mine)));
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.load(mine).has_value());
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            fmt::format("frank-jit: warning: discarding corrupt cache entry {}: it holds key {}\n",
                        cache.pathOf(mine), theirs.hex()));
  EXPECT_FALSE(fileExists(cache.pathOf(mine)));
}

// An entry that is a FIFO would block the open until a writer came, and a link to /dev/zero
// would be read without end: both are discarded at once, as any entry that is not a file.
TEST(DiskCacheEntries, EntriesThatAreNotRegularFilesAreDiscarded) {
  for (const char *kind : {"fifo", "link to /dev/zero", "directory"}) {
    SCOPED_TRACE(kind);
    TempDir dir;
    DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
    DiskCacheKey key = keyOf(kind);
    const std::string path = cache.pathOf(key);
    if (std::string(kind) == "fifo")
      ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    else if (std::string(kind) == "directory")
      ASSERT_FALSE(fs::create_directory(path));
    else
      ASSERT_EQ(::symlink("/dev/zero", path.c_str()), 0);
    EXPECT_TRUE(cache.list().empty());
    testing::internal::CaptureStderr();
    EXPECT_FALSE(cache.load(key).has_value());
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              fmt::format("frank-jit: warning: discarding corrupt cache entry {}: it is not a "
                          "regular file\n",
                          path));
    ASSERT_TRUE(cache.store(key, "d", "o")); // the next store takes its place
    EXPECT_EQ(cache.load(key), "o");
  }
}

void setAge(const std::string &path, int seconds) {
  int fd = -1;
  ASSERT_FALSE(fs::openFileForWrite(path, fd, fs::CD_OpenExisting, fs::OF_Append));
  auto when = std::chrono::system_clock::now() - std::chrono::seconds(seconds);
  EXPECT_FALSE(fs::setLastAccessAndModificationTime(fd, when));
  ::close(fd);
}

TEST(DiskCacheEntries, CapEvictsLeastRecentlyUsedEntries) {
  TempDir dir;
  const std::string object(1000, 'o');
  const uint64_t entryBytes = jit::entry::kHeaderBytes + 1 + object.size();
  DiskCache cache(dir.path(), 3 * entryBytes + entryBytes / 2); // room for three
  DiskCacheKey a = keyOf("a"), b = keyOf("b"), c = keyOf("c"), d = keyOf("d");
  for (const DiskCacheKey &k : {a, b, c})
    ASSERT_TRUE(cache.store(k, "d", object));
  setAge(cache.pathOf(a), 300);
  setAge(cache.pathOf(b), 200);
  setAge(cache.pathOf(c), 100);
  ASSERT_TRUE(cache.load(a).has_value()); // a hit makes `a` the most recently used
  ASSERT_TRUE(cache.store(d, "d", object));
  EXPECT_TRUE(fileExists(cache.pathOf(a)));
  EXPECT_FALSE(fileExists(cache.pathOf(b)));
  EXPECT_TRUE(fileExists(cache.pathOf(c)));
  EXPECT_TRUE(fileExists(cache.pathOf(d)));
  // Least recently used first.
  auto entries = cache.list();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].key, c);

  // Two more: c and then the oldest of the rest go.
  DiskCache small(dir.path(), 2 * entryBytes);
  setAge(cache.pathOf(d), 50);
  ASSERT_TRUE(small.store(keyOf("e"), "d", object));
  EXPECT_FALSE(fileExists(cache.pathOf(c)));
  EXPECT_FALSE(fileExists(cache.pathOf(d)));
  EXPECT_TRUE(fileExists(cache.pathOf(a)));
  EXPECT_TRUE(fileExists(cache.pathOf(keyOf("e"))));
}

TEST(DiskCacheEntries, ClearRemovesEntriesAndLeftoverTemporaries) {
  TempDir dir;
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  ASSERT_TRUE(cache.store(keyOf("a"), "d", "o"));
  ASSERT_TRUE(cache.store(keyOf("b"), "d", "o"));
  writeFile(cache.pathOf(keyOf("c")) + ".tmp-12345678", "partial");
  writeFile(dir / "notes.txt", "not ours");
  // Named like entries but no regular files: removed, and not counted, as `list` skips them.
  ASSERT_FALSE(llvm::sys::fs::create_directory(cache.pathOf(keyOf("d"))));
  ASSERT_FALSE(llvm::sys::fs::create_link("/dev/null", cache.pathOf(keyOf("e"))));
  EXPECT_EQ(cache.list().size(), 2u);
  EXPECT_EQ(cache.clear(), 2u);
  EXPECT_EQ(filesIn(dir.path()), std::vector<std::string>{"notes.txt"});
}

TEST(DiskCacheEntries, StaleTemporariesGoWithTheNextWrite) {
  TempDir dir;
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  std::string stale = cache.pathOf(keyOf("a")) + ".tmp-aaaaaaaa";
  std::string fresh = cache.pathOf(keyOf("b")) + ".tmp-bbbbbbbb";
  writeFile(stale, "partial");
  writeFile(fresh, "partial");
  setAge(stale, 2 * 3600);
  ASSERT_TRUE(cache.store(keyOf("c"), "d", "o"));
  EXPECT_FALSE(fileExists(stale));
  EXPECT_TRUE(fileExists(fresh)); // a writer may still be busy with it
}

// ---- Settings ----------------------------------------------------------------------------------

TEST(DiskCacheSettings, DirectoryFromOptionsThenEnvironment) {
  ScopedEnv cache("FRANK_CACHE", nullptr), dir("FRANK_CACHE_DIR", nullptr),
      xdg("XDG_CACHE_HOME", nullptr), home("HOME", "/home/someone");
  auto resolve = [](const std::string &explicitDir = "") {
    return jit::resolveDiskCacheSettings(std::nullopt, explicitDir, 0);
  };
  EXPECT_EQ(resolve().directory, "/home/someone/.cache/frank-jit");
  EXPECT_TRUE(resolve().enabled);
  EXPECT_EQ(resolve().status, "enabled");
  {
    ScopedEnv relative("XDG_CACHE_HOME", "relative/cache"); // invalid per XDG: ignored
    EXPECT_EQ(resolve().directory, "/home/someone/.cache/frank-jit");
  }
  ScopedEnv xdgSet("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(resolve().directory, "/xdg/frank-jit");
  ScopedEnv dirSet("FRANK_CACHE_DIR", "/explicit/env");
  EXPECT_EQ(resolve().directory, "/explicit/env");
  EXPECT_EQ(resolve("/from/options/").directory, "/from/options");
  {
    ScopedEnv none("HOME", nullptr), noXdg("XDG_CACHE_HOME", nullptr),
        noDir("FRANK_CACHE_DIR", nullptr);
    EXPECT_FALSE(resolve().enabled);
    EXPECT_EQ(resolve().status,
              "disabled: no directory (set FRANK_CACHE_DIR, XDG_CACHE_HOME or HOME)");
  }
}

TEST(DiskCacheSettings, OnAndOff) {
  ScopedEnv dir("FRANK_CACHE_DIR", "/c");
  {
    ScopedEnv off("FRANK_CACHE", "off");
    auto s = jit::resolveDiskCacheSettings(std::nullopt, "", 0);
    EXPECT_FALSE(s.enabled);
    EXPECT_EQ(s.status, "disabled by FRANK_CACHE=off");
    ScopedEnv upper("FRANK_CACHE", "OFF");
    EXPECT_FALSE(jit::resolveDiskCacheSettings(std::nullopt, "", 0).enabled);
    // An explicit choice wins over the environment.
    EXPECT_TRUE(jit::resolveDiskCacheSettings(true, "", 0).enabled);
  }
  {
    ScopedEnv on("FRANK_CACHE", "on");
    EXPECT_TRUE(jit::resolveDiskCacheSettings(std::nullopt, "", 0).enabled);
    auto s = jit::resolveDiskCacheSettings(false, "", 0);
    EXPECT_FALSE(s.enabled);
    EXPECT_EQ(s.status, "disabled by the caller (--no-disk-cache or ContextOptions::diskCache)");
  }
  {
    ScopedEnv odd("FRANK_CACHE", "sometimes");
    testing::internal::CaptureStderr();
    EXPECT_TRUE(jit::resolveDiskCacheSettings(std::nullopt, "", 0).enabled);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "frank-jit: warning: ignoring FRANK_CACHE='sometimes': expected on or off\n");
  }
}

TEST(DiskCacheSettings, SizeCap) {
  ScopedEnv dir("FRANK_CACHE_DIR", "/c");
  auto cap = [] { return jit::resolveDiskCacheSettings(std::nullopt, "", 0).maxBytes; };
  {
    ScopedEnv unset("FRANK_CACHE_MAX_BYTES", nullptr);
    EXPECT_EQ(cap(), uint64_t{512} << 20);
  }
  for (auto [text, bytes] : std::vector<std::pair<const char *, uint64_t>>{
           {"4096", 4096}, {"64K", 65536}, {"3M", 3 << 20}, {"2GiB", uint64_t{2} << 30}}) {
    ScopedEnv set("FRANK_CACHE_MAX_BYTES", text);
    EXPECT_EQ(cap(), bytes) << text;
  }
  {
    ScopedEnv set("FRANK_CACHE_MAX_BYTES", "lots");
    testing::internal::CaptureStderr();
    EXPECT_EQ(cap(), uint64_t{512} << 20);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "frank-jit: warning: ignoring FRANK_CACHE_MAX_BYTES='lots': expected a positive "
              "byte count such as 536870912 or 512M\n");
  }
  // 2^64 bytes wrapped to a cap of 0, which emptied the cache as it filled it.
  for (const char *huge : {"17179869184G", "17179869185G"}) {
    ScopedEnv set("FRANK_CACHE_MAX_BYTES", huge);
    testing::internal::CaptureStderr();
    EXPECT_EQ(cap(), uint64_t{512} << 20) << huge;
    EXPECT_NE(testing::internal::GetCapturedStderr().find("ignoring FRANK_CACHE_MAX_BYTES"),
              std::string::npos)
        << huge;
  }
  ScopedEnv set("FRANK_CACHE_MAX_BYTES", "1M");
  EXPECT_EQ(jit::resolveDiskCacheSettings(std::nullopt, "", 12345).maxBytes, 12345u);
}

// ---- Kernels -----------------------------------------------------------------------------------

TEST(DiskCacheKernels, RuntimeDimsShareOneEntryAcrossSizes) {
  TempDir dir;
  std::string cacheDir = dir / "cache";
  RmsCase small(dir, 3, 80), large(dir, 11, 80);
  const std::string description =
      "@rms_norm_linalg (specialized, ?x80xf32, 80xf32, f32) of rms_norm.mlir for " + targetCpu();
  ToolResult first =
      small.run(cacheDir, dir / "y1.npy", {{"FRANK_DEBUG", "1"}}, {"--runtime-dims=input:0"});
  EXPECT_SUCCESS(first);
  EXPECT_THAT(first.err, HasSubstr(fmt::format("frank: compiled {} in ", description)));
  // Another process, another row count: the same kernel, from disk.
  ToolResult second =
      large.run(cacheDir, dir / "y2.npy", {{"FRANK_DEBUG", "1"}}, {"--runtime-dims=input:0"});
  EXPECT_SUCCESS(second);
  EXPECT_THAT(second.err,
              HasSubstr(fmt::format("frank: loaded {} from the disk cache in ", description)));
  EXPECT_EQ(entriesIn(cacheDir).size(), 1u);
  large.expectMatchesOracle(readNpy(dir / "y2.npy"));
}

TEST(DiskCacheKernels, LaterProcessLoadsInsteadOfCompiling) {
  TempDir dir;
  std::string cacheDir = dir / "cache";
  RmsCase c(dir, 3, 80);
  ToolResult first = c.run(cacheDir, dir / "y1.npy", {{"FRANK_DEBUG", "1"}});
  EXPECT_SUCCESS(first);
  EXPECT_THAT(first.err, HasSubstr(fmt::format("frank: compiled {} in ", c.description())));
  ASSERT_EQ(entriesIn(cacheDir).size(), 1u);
  Tensor compiled = readNpy(dir / "y1.npy");

  // Another process: loaded, not compiled.
  ToolResult second = c.run(cacheDir, dir / "y2.npy", {{"FRANK_DEBUG", "1"}});
  EXPECT_SUCCESS(second);
  EXPECT_THAT(second.err,
              HasSubstr(fmt::format("frank: loaded {} from the disk cache in ", c.description())));
  EXPECT_THAT(second.err, Not(HasSubstr("frank: compiled")));
  expectBitIdentical(readNpy(dir / "y2.npy"), compiled);

  // This process, through the API: one disk hit, nothing compiled or written.
  Context ctx(diskCacheIn(cacheDir));
  Function fn = ctx.load(kRmsNorm).function("rms_norm_linalg");
  Kernel k = fn.specialize(c.args());
  EXPECT_TRUE(k.loadedFromDisk());
  CacheStats stats = ctx.cacheStats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.diskHits, 1u);
  EXPECT_EQ(stats.diskMisses, 0u);
  EXPECT_EQ(stats.diskWrites, 0u);
  EXPECT_EQ(stats.compileSeconds, 0.0);
  EXPECT_GT(stats.diskLoadSeconds, 0.0);
  Tensor y = k(c.args())[0];
  expectBitIdentical(y, compiled);
  c.expectMatchesOracle(y);

  // The second call is a memory hit.
  fn(c.args());
  EXPECT_EQ(ctx.cacheStats().hits, 1u);
  EXPECT_EQ(ctx.cacheStats().diskHits, 1u);
  EXPECT_EQ(entriesIn(cacheDir).size(), 1u);
}

TEST(DiskCacheKernels, OtherShapesModesAndOptionsMiss) {
  TempDir dir;
  RmsCase c(dir, 5, 72), other(dir, 6, 72);
  auto compileIn = [&](ContextOptions options, RmsCase &rc, Mode mode) {
    Context ctx(options);
    Kernel k = ctx.load(kRmsNorm).function("rms_norm_linalg").specialize(rc.args(), mode);
    EXPECT_FALSE(k.loadedFromDisk());
    rc.expectMatchesOracle(k(rc.args())[0]);
    CacheStats s = ctx.cacheStats();
    EXPECT_EQ(s.diskHits, 0u);
    EXPECT_EQ(s.diskMisses, 1u);
    EXPECT_EQ(s.diskWrites, 1u);
    EXPECT_GT(s.compileSeconds, 0.0);
  };
  ContextOptions options = diskCacheIn(dir.path());
  compileIn(options, c, Mode::Specialized);
  compileIn(options, other, Mode::Specialized);
  compileIn(options, c, Mode::Generic);
  ContextOptions noChecks = options;
  noChecks.boundsChecks = false;
  compileIn(noChecks, c, Mode::Specialized);
  ContextOptions config = options;
  config.loweringConfig = "pipeline=loops";
  compileIn(config, c, Mode::Specialized);
  EXPECT_EQ(entriesIn(dir.path()).size(), 5u);

  // A kernel this process already holds needs no disk at all.
  Context again(options);
  again.load(kRmsNorm).function("rms_norm_linalg").specialize(c.args());
  EXPECT_EQ(again.cacheStats().misses, 1u);
  EXPECT_EQ(again.cacheStats().diskHits, 0u);
  EXPECT_EQ(again.cacheStats().diskMisses, 0u);
  EXPECT_EQ(again.cacheStats().diskWrites, 0u);
  EXPECT_EQ(entriesIn(dir.path()).size(), 5u);
}

TEST(DiskCacheKernels, DamagedEntriesAreDiscardedAndRecompiled) {
  int64_t rows = 20;
  for (const Damage &damage : damages()) {
    SCOPED_TRACE(damage.name);
    TempDir dir;
    RmsCase c(dir, rows++, 40);
    ToolResult written = c.run(dir.path(), dir / "y.npy");
    EXPECT_SUCCESS(written);
    auto entries = entriesIn(dir.path());
    ASSERT_EQ(entries.size(), 1u);
    std::string bytes = readFile(entries[0]);
    const size_t size = bytes.size();
    damage.apply(bytes);
    writeFile(entries[0], bytes);

    Context ctx(diskCacheIn(dir.path()));
    testing::internal::CaptureStderr();
    Kernel k = ctx.load(kRmsNorm).function("rms_norm_linalg").specialize(c.args());
    std::string err = testing::internal::GetCapturedStderr();
    std::string reason = damage.reason;
    // The byte counts of the canned reasons are for a 77-byte entry.
    if (std::string(damage.name) == "Truncated")
      reason = fmt::format("truncated ({} of {} bytes)", size - 3, size);
    EXPECT_EQ(err, fmt::format("frank-jit: warning: discarding corrupt cache entry {}: {}\n",
                               entries[0], reason));
    EXPECT_FALSE(k.loadedFromDisk());
    CacheStats s = ctx.cacheStats();
    EXPECT_EQ(s.diskHits, 0u);
    EXPECT_EQ(s.diskMisses, 1u);
    EXPECT_EQ(s.diskWrites, 1u);
    Tensor y = k(c.args())[0];
    c.expectMatchesOracle(y);
    expectBitIdentical(y, readNpy(dir / "y.npy"));
    // Rewritten whole.
    auto listed = DiskCache(dir.path(), jit::kDefaultDiskCacheBytes).list();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].problem, "");
    EXPECT_EQ(listed[0].description, c.description());
  }
}

TEST(DiskCacheKernels, EntryWhoseObjectDoesNotLinkIsDiscarded) {
  TempDir dir;
  RmsCase a(dir, 7, 48), b(dir, 8, 48);
  EXPECT_SUCCESS(a.run(dir.path(), dir / "ya.npy"));
  std::vector<std::string> onlyA = entriesIn(dir.path());
  ASSERT_EQ(onlyA.size(), 1u);
  EXPECT_SUCCESS(b.run(dir.path(), dir / "yb.npy"));
  std::vector<std::string> both = entriesIn(dir.path());
  ASSERT_EQ(both.size(), 2u);
  std::string pathB = both[0] == onlyA[0] ? both[1] : both[0];

  // b's entry, intact, but holding a's object: it does not define b's kernel.
  DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
  std::string entryA = readFile(onlyA[0]);
  std::string objectA = entryA.substr(jit::entry::kHeaderBytes + a.description().size());
  auto keyB = DiskCacheKey::fromHex(llvm::sys::path::stem(pathB).str());
  ASSERT_TRUE(keyB.has_value());
  ASSERT_TRUE(cache.store(*keyB, b.description(), objectA));

  Context ctx(diskCacheIn(dir.path()));
  Function fn = ctx.load(kRmsNorm).function("rms_norm_linalg");
  testing::internal::CaptureStderr();
  Kernel kb = fn.specialize(b.args());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr(fmt::format("frank-jit: warning: discarding corrupt cache entry {}: "
                                         "the JIT cannot link it: ",
                                         pathB)));
  EXPECT_FALSE(kb.loadedFromDisk());
  b.expectMatchesOracle(kb(b.args())[0]);
  // What the refused object defined is gone again: a's own entry still loads.
  Kernel ka = fn.specialize(a.args());
  EXPECT_TRUE(ka.loadedFromDisk());
  expectBitIdentical(ka(a.args())[0], readNpy(dir / "ya.npy"));
  EXPECT_EQ(ctx.cacheStats().diskHits, 1u);
  EXPECT_EQ(ctx.cacheStats().diskMisses, 1u);
}

// An intact entry whose payload is not the list of objects a kernel is stored as (its count,
// then each object's size and bytes): discarded and compiled again, never linked.
TEST(DiskCacheKernels, PayloadThatIsNotAListOfObjectsIsDiscarded) {
  TempDir dir;
  RmsCase c(dir, 9, 40);
  EXPECT_SUCCESS(c.run(dir.path(), dir / "y.npy"));
  std::vector<std::string> entries = entriesIn(dir.path());
  ASSERT_EQ(entries.size(), 1u);
  auto key = DiskCacheKey::fromHex(llvm::sys::path::stem(entries[0]).str());
  ASSERT_TRUE(key.has_value());
  std::string payload =
      readFile(entries[0]).substr(jit::entry::kHeaderBytes + c.description().size());
  std::string oneObjectTooShort = payload.substr(0, payload.size() - 1);
  std::string countTooLarge = payload;
  countTooLarge[0] = char(countTooLarge[0] + 1);
  for (const std::string &bad : {std::string("\x7f"
                                             "ELF"),
                                 oneObjectTooShort, countTooLarge}) {
    DiskCache cache(dir.path(), jit::kDefaultDiskCacheBytes);
    ASSERT_TRUE(cache.store(*key, c.description(), bad));
    ToolResult r = c.run(dir.path(), dir / "y2.npy", {{"FRANK_DEBUG", "1"}});
    EXPECT_SUCCESS(r);
    EXPECT_THAT(r.err, HasSubstr("discarding corrupt cache entry"));
    EXPECT_THAT(r.err, HasSubstr("the cached kernel is not a list of objects"));
    EXPECT_THAT(r.err, HasSubstr("frank: compiled"));
    expectBitIdentical(readNpy(dir / "y2.npy"), readNpy(dir / "y.npy"));
  }
}

TEST(DiskCacheKernels, ConcurrentProcessesBothSucceed) {
  TempDir dir;
  EnvOverrides env{{"FRANK_CACHE", "on"}, {"FRANK_CACHE_DIR", dir.path()}, {"FRANK_DEBUG", "1"}};
  std::vector<std::string> args{"run",
                                kMatmul,
                                "--function=matmul",
                                "--input=48x384xf32=random",
                                "--input=384x320xf32=random",
                                "--print-max-elements=16"};
  RunningTool one = spawnTool(args, env), two = spawnTool(args, env);
  ToolResult r1 = waitTool(one), r2 = waitTool(two);
  EXPECT_SUCCESS(r1);
  EXPECT_SUCCESS(r2);
  EXPECT_EQ(r1.out, r2.out);
  // Both compiled (neither found the other's entry) or one loaded what the other wrote.
  for (const ToolResult *r : {&r1, &r2})
    EXPECT_THAT(r->err, testing::AnyOf(HasSubstr("frank: compiled @matmul"),
                                       HasSubstr("frank: loaded @matmul")));
  EXPECT_THAT(r1.err + r2.err, Not(HasSubstr("warning")));
  ASSERT_EQ(filesIn(dir.path()).size(), 1u); // one entry, no temporary left behind
  auto listed = DiskCache(dir.path(), jit::kDefaultDiskCacheBytes).list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].problem, "");
  ToolResult third = runTool(args, env);
  EXPECT_SUCCESS(third);
  EXPECT_THAT(third.err, HasSubstr("frank: loaded @matmul (specialized, 48x384xf32, 384x320xf32) "
                                   "of matmul.mlir for " +
                                   targetCpu() + " from the disk cache"));
  EXPECT_EQ(third.out, r1.out);
}

TEST(DiskCacheKernels, DisabledCacheWritesNothing) {
  TempDir dir;
  std::string cacheDir = dir / "cache";
  RmsCase c(dir, 9, 56);
  {
    ContextOptions options = diskCacheIn(cacheDir);
    options.diskCache = false;
    Context ctx(options);
    ctx.load(kRmsNorm).function("rms_norm_linalg")(c.args());
    CacheStats s = ctx.cacheStats();
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.diskHits + s.diskMisses + s.diskWrites, 0u);
  }
  EXPECT_FALSE(fileExists(cacheDir));
  // The command line: FRANK_CACHE=off, and --no-disk-cache over FRANK_CACHE=on.
  ToolResult off = c.run(cacheDir, dir / "y.npy", {{"FRANK_CACHE", "off"}});
  EXPECT_SUCCESS(off);
  EXPECT_FALSE(fileExists(cacheDir));
  ToolResult flag =
      runTool({"run", kRmsNorm, "--function=rms_norm_linalg", "--input=9x56xf32=random",
               "--input=56xf32=random", "--input=f32=1e-6", "--no-disk-cache"},
              {{"FRANK_CACHE", "on"}, {"FRANK_CACHE_DIR", cacheDir}});
  EXPECT_SUCCESS(flag);
  EXPECT_FALSE(fileExists(cacheDir));
}

// ---- frank-jit cache ---------------------------------------------------------------------------

TEST(DiskCacheCli, StatsLsAndClear) {
  TempDir dir;
  std::string cacheDir = dir / "cache";
  EnvOverrides env{{"FRANK_CACHE", std::nullopt},
                   {"FRANK_CACHE_DIR", cacheDir},
                   {"FRANK_CACHE_MAX_BYTES", "1M"}};
  ToolResult empty = runTool({"cache", "stats"}, env);
  EXPECT_SUCCESS(empty);
  EXPECT_EQ(empty.out, fmt::format("directory: {}\nstatus:    enabled (created on first use)\n"
                                   "entries:   0\n"
                                   "size:      0 B (0 bytes)\ncap:       1.0 MiB (1048576 bytes)\n",
                                   cacheDir));
  RmsCase a(dir, 2, 24), b(dir, 3, 24);
  EXPECT_SUCCESS(a.run(cacheDir, dir / "ya.npy"));
  // The choices as parsed, not as typed: ` tile = 2x1,` is named and keyed as `tile=2x1`.
  EXPECT_SUCCESS(b.run(cacheDir, dir / "yb.npy", {}, {"--cpu=x86-64-v3", "--config= tile = 2x1,"}));
  auto entries = entriesIn(cacheDir);
  ASSERT_EQ(entries.size(), 2u);
  uint64_t total = 0;
  for (const std::string &e : entries)
    total += readFile(e).size();

  ToolResult stats = runTool({"cache", "stats"}, env);
  EXPECT_SUCCESS(stats);
  EXPECT_THAT(stats.out, HasSubstr("entries:   2\n"));
  EXPECT_THAT(stats.out, HasSubstr(fmt::format("({} bytes)\ncap:", total)));

  ToolResult ls = runTool({"cache", "ls"}, env);
  EXPECT_SUCCESS(ls);
  std::vector<std::string> lines;
  std::istringstream in(ls.out);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u) << ls.out;
  std::regex row(R"( *[0-9.]+ (B|KiB)  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  @rms_norm_linalg .*)");
  for (const std::string &line : lines)
    EXPECT_TRUE(std::regex_match(line, row)) << line;
  // Each entry names its file and CPU, and a hand-set strategy: entries differ by each.
  EXPECT_THAT(ls.out, HasSubstr(a.description() + "\n"));
  EXPECT_THAT(ls.out, HasSubstr(b.description("x86-64-v3") + ", --config=tile=2x1\n"));

  // A damaged entry is listed as such, not removed: ls only reads.
  std::string bytes = readFile(entries[0]);
  bytes.back() ^= 1;
  writeFile(entries[0], bytes);
  ToolResult damaged = runTool({"cache", "ls"}, env);
  EXPECT_SUCCESS(damaged);
  EXPECT_THAT(damaged.out, HasSubstr(fmt::format("(corrupt: checksum mismatch) {}", entries[0])));
  EXPECT_TRUE(fileExists(entries[0]));

  ToolResult clear = runTool({"cache", "clear"}, env);
  EXPECT_SUCCESS(clear);
  EXPECT_EQ(clear.out, fmt::format("removed 2 entries from {}\n", cacheDir));
  EXPECT_TRUE(entriesIn(cacheDir).empty());
  ToolResult after = runTool({"cache", "ls"}, env);
  EXPECT_SUCCESS(after);
  EXPECT_EQ(after.out, "");
}

TEST(DiskCacheCli, StatsSayWhyTheCacheIsOff) {
  TempDir dir;
  ToolResult off =
      runTool({"cache", "stats"}, {{"FRANK_CACHE_DIR", dir.path()}, {"FRANK_CACHE", "off"}});
  EXPECT_SUCCESS(off);
  EXPECT_THAT(off.out, HasSubstr("status:    disabled by FRANK_CACHE=off\n"));
  ASSERT_FALSE(fs::setPermissions(dir.path(), fs::all_all));
  ToolResult open = runTool({"cache", "stats"}, {{"FRANK_CACHE_DIR", dir.path()}});
  EXPECT_SUCCESS(open);
  EXPECT_THAT(open.out, HasSubstr("status:    refused: it is writable by its group or by others"));
  // ls and clear still work there, and say that kernels do not load from it.
  for (const char *action : {"ls", "clear"}) {
    ToolResult r = runTool({"cache", action}, {{"FRANK_CACHE_DIR", dir.path()}});
    EXPECT_SUCCESS(r);
    EXPECT_THAT(r.err, HasSubstr(fmt::format("frank-jit: warning: kernels are neither loaded from "
                                             "nor stored in {}: it is writable by its group or by "
                                             "others",
                                             dir.path())))
        << action;
  }
  // A directory that cannot be made where it is asked for (under a file) is refused too.
  writeFile(dir / "file", "");
  ToolResult under = runTool({"cache", "stats"}, {{"FRANK_CACHE_DIR", dir / "file/cache"}});
  EXPECT_SUCCESS(under);
  EXPECT_THAT(under.out, HasSubstr("status:    refused: cannot inspect it: Not a directory\n"));
}

TEST(DiskCacheCli, Errors) {
  ToolResult unknown = runTool({"cache", "purge"});
  EXPECT_FAILURE(unknown);
  EXPECT_EQ(unknown.err,
            "frank-jit: error: unknown cache command 'purge' (expected stats, ls or clear)\n");
  ToolResult missing = runTool({"cache"});
  EXPECT_FAILURE(missing);
  EXPECT_EQ(missing.err, "frank-jit: error: choose a cache command: stats, ls or clear\n");
}

} // namespace
} // namespace frank::test
