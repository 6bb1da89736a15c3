#include "core/file_system.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace hoist {
namespace {

namespace fs_std = std::filesystem;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_fs_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override { fs_std::remove_all(dir_); }

  std::string PathOf(const std::string& name) const { return dir_ + "/" + name; }

  static void WriteString(const std::string& path, const std::string& contents) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << contents;
    ASSERT_TRUE(out.good()) << path;
  }
  static std::string ReadString(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs_std::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // Writes `contents` to `path` through `fs` in two appends, then syncs and closes.
  static Status WriteThrough(FileSystem& fs, const std::string& path, const std::string& contents) {
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(path));
    const int64_t half = static_cast<int64_t>(contents.size() / 2);
    HOIST_RETURN_IF_ERROR(file->Append(contents.data(), half));
    HOIST_RETURN_IF_ERROR(
        file->Append(contents.data() + half, static_cast<int64_t>(contents.size()) - half));
    HOIST_RETURN_IF_ERROR(file->Sync());
    return file->Close();
  }

  FileSystem& posix_ = FileSystem::Posix();
  std::string dir_;
};

TEST_F(FileSystemTest, WrittenFileReadsBackWhole) {
  const std::string path = PathOf("a.txt");
  ASSERT_TRUE(WriteThrough(posix_, path, "hello, file system").ok());
  StatusOr<std::string> text = ReadFileToString(posix_, path);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "hello, file system");
}

TEST_F(FileSystemTest, ReadFileToStringReadsFilesLargerThanOneChunk) {
  std::string contents(300000, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 31 % 251);
  WriteString(PathOf("big.bin"), contents);
  StatusOr<std::string> text = ReadFileToString(posix_, PathOf("big.bin"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, contents);
}

TEST_F(FileSystemTest, RandomAccessReadStopsShortOnlyAtTheEnd) {
  WriteString(PathOf("a.bin"), "0123456789");
  StatusOr<std::unique_ptr<RandomAccessFile>> file = posix_.NewRandomAccessFile(PathOf("a.bin"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->size_bytes(), 10);
  EXPECT_EQ((*file)->path(), PathOf("a.bin"));
  char buffer[8] = {};
  StatusOr<int64_t> n = (*file)->Read(2, buffer, 4);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4);
  EXPECT_EQ(std::string(buffer, 4), "2345");
  n = (*file)->Read(7, buffer, 8);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3);
  EXPECT_EQ(std::string(buffer, 3), "789");
  n = (*file)->Read(20, buffer, 8);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0);
}

TEST_F(FileSystemTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = PathOf("absent");
  for (const Status& status :
       {posix_.NewRandomAccessFile(path).status(), posix_.MapReadOnly(path).status(),
        posix_.Stat(path).status(), posix_.ListDirectory(path).status(),
        ReadFileToString(posix_, path).status(), posix_.SyncDir(path)}) {
    EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr(path));
  }
}

// A named pipe given as a model, shard or checkpoint file used to hang in open(2), waiting for a
// writer that never comes. Each opener runs on its own thread so that a hang fails the test: after
// the deadline the test opens the pipe's other end, which releases the open.
TEST_F(FileSystemTest, NamedPipeIsRefusedByNameInsteadOfWaitedOn) {
  const std::string fifo = PathOf("model.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::vector<std::function<Status()>> openers = {
      [&] { return posix_.NewRandomAccessFile(fifo).status(); },
      [&] { return posix_.MapReadOnly(fifo).status(); },
      [&] { return ReadFileToString(posix_, fifo).status(); },
  };
  for (const auto& open : openers) {
    std::future<Status> opened = std::async(std::launch::async, open);
    if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      const int release = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
      opened.wait();
      if (release >= 0) ::close(release);
      ADD_FAILURE() << "opening a named pipe waited for a writer";
      continue;
    }
    const Status status = opened.get();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr("'" + fifo + "' is not a regular file"));
    EXPECT_THAT(status.message(), HasSubstr("named pipe"));
  }
}

TEST_F(FileSystemTest, DirectoryIsNotAFileToRead) {
  const Status status = posix_.NewRandomAccessFile(dir_).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("is a directory"));
}

TEST_F(FileSystemTest, ReadFileToStringRefusesMoreThanItsLimit) {
  WriteString(PathOf("a.json"), std::string(100, 'x'));
  EXPECT_TRUE(ReadFileToString(posix_, PathOf("a.json"), 100).ok());
  const Status status = ReadFileToString(posix_, PathOf("a.json"), 99).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(PathOf("a.json") + "' holds more than 99 bytes"));
}

TEST_F(FileSystemTest, StatTellsFilesFromDirectories) {
  WriteString(PathOf("a.bin"), "12345");
  StatusOr<FileInfo> file = posix_.Stat(PathOf("a.bin"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->type, FileType::kRegular);
  EXPECT_EQ(file->size_bytes, 5);
  StatusOr<FileInfo> dir = posix_.Stat(dir_);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->type, FileType::kDirectory);
}

TEST_F(FileSystemTest, ListDirectoryNamesEntriesWithoutDots) {
  WriteString(PathOf("a"), "");
  ASSERT_TRUE(posix_.CreateDirs(PathOf("sub/deeper")).ok());
  StatusOr<std::vector<std::string>> names = posix_.ListDirectory(dir_);
  ASSERT_TRUE(names.ok());
  EXPECT_THAT(*names, UnorderedElementsAre("a", "sub"));
  EXPECT_TRUE(posix_.CreateDirs(PathOf("sub/deeper")).ok()) << "an existing directory is fine";
}

TEST_F(FileSystemTest, MappingHoldsTheFileAndAnEmptyFileMapsEmpty) {
  WriteString(PathOf("a.bin"), "mapped bytes");
  StatusOr<std::unique_ptr<ReadOnlyMapping>> mapping = posix_.MapReadOnly(PathOf("a.bin"));
  ASSERT_TRUE(mapping.ok()) << mapping.status().ToString();
  const std::span<const std::byte> bytes = (*mapping)->bytes();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "mapped bytes");

  WriteString(PathOf("empty"), "");
  mapping = posix_.MapReadOnly(PathOf("empty"));
  ASSERT_TRUE(mapping.ok());
  EXPECT_TRUE((*mapping)->bytes().empty());

  mapping = posix_.MapReadOnly(dir_);
  EXPECT_EQ(mapping.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(mapping.status().message(), HasSubstr(dir_));
}

TEST_F(FileSystemTest, RemoveTakesFilesAndEmptyDirectoriesAndToleratesMissing) {
  WriteString(PathOf("a"), "x");
  ASSERT_TRUE(posix_.CreateDirs(PathOf("full/inner")).ok());
  ASSERT_TRUE(posix_.CreateDirs(PathOf("empty")).ok());
  EXPECT_TRUE(posix_.Remove(PathOf("a")).ok());
  EXPECT_TRUE(posix_.Remove(PathOf("empty")).ok());
  EXPECT_TRUE(posix_.Remove(PathOf("a")).ok()) << "a missing path is fine";
  const Status not_empty = posix_.Remove(PathOf("full"));
  EXPECT_FALSE(not_empty.ok());
  EXPECT_THAT(not_empty.message(), HasSubstr(PathOf("full")));
  EXPECT_TRUE(posix_.RemoveAll(PathOf("full")).ok());
  EXPECT_TRUE(posix_.RemoveAll(PathOf("full")).ok());
  EXPECT_TRUE(Listing().empty());
}

TEST_F(FileSystemTest, RenameReplacesTheDestination) {
  WriteString(PathOf("from"), "new");
  WriteString(PathOf("to"), "old");
  ASSERT_TRUE(posix_.Rename(PathOf("from"), PathOf("to")).ok());
  EXPECT_EQ(ReadString(PathOf("to")), "new");
  EXPECT_EQ(Listing(), std::vector<std::string>{"to"});
  const Status missing = posix_.Rename(PathOf("from"), PathOf("to"));
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr(PathOf("from")));
}

TEST_F(FileSystemTest, ExchangeSwapsTwoDirectories) {
  ASSERT_TRUE(posix_.CreateDirs(PathOf("a")).ok());
  ASSERT_TRUE(posix_.CreateDirs(PathOf("b")).ok());
  WriteString(PathOf("a/in_a"), "");
  const Status status = posix_.Exchange(PathOf("a"), PathOf("b"));
  if (status.code() == StatusCode::kUnimplemented) {
    GTEST_SKIP() << "the temporary directory's file system cannot exchange: " << status.message();
  }
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(fs_std::exists(PathOf("b/in_a")));
  EXPECT_FALSE(fs_std::exists(PathOf("a/in_a")));
}

TEST_F(FileSystemTest, LinkGivesTheFileASecondNameAndRefusesAnExistingOne) {
  WriteString(PathOf("a"), "shared");
  ASSERT_TRUE(posix_.Link(PathOf("a"), PathOf("b")).ok());
  ASSERT_TRUE(posix_.Remove(PathOf("a")).ok());
  EXPECT_EQ(ReadString(PathOf("b")), "shared");
  WriteString(PathOf("c"), "");
  const Status exists = posix_.Link(PathOf("b"), PathOf("c"));
  EXPECT_FALSE(exists.ok());
  EXPECT_THAT(exists.message(), HasSubstr(PathOf("c")));
}

// A kill after the n-th call: n calls reach the disk, then nothing does, cleanup included.
TEST_F(FileSystemTest, CrashAfterLetsThatManyCallsThroughAndThenNothing) {
  FaultInjectingFileSystem crashing;
  crashing.CrashAfter(2);  // the open and the first append; the second append fails
  const Status written = WriteThrough(crashing, PathOf("f"), "abcdef");
  EXPECT_EQ(written.code(), StatusCode::kIoError);
  EXPECT_THAT(written.message(), HasSubstr("after an injected crash"));
  EXPECT_EQ(ReadString(PathOf("f")), "abc");
  EXPECT_FALSE(crashing.Remove(PathOf("f")).ok());
  EXPECT_FALSE(crashing.CreateDirs(PathOf("d")).ok());
  EXPECT_EQ(Listing(), std::vector<std::string>{"f"});
  crashing.Clear();
  EXPECT_TRUE(crashing.Remove(PathOf("f")).ok());
}

TEST_F(FileSystemTest, WriteFileAtomicallyReplacesAndLeavesNoTemporary) {
  const std::string path = PathOf("a.txt");
  WriteString(path, "old contents");
  const std::string_view pieces[] = {"new ", "contents"};
  ASSERT_TRUE(WriteFileAtomically(posix_, path, pieces).ok());
  EXPECT_EQ(ReadString(path), "new contents");
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.txt"});
}

TEST_F(FileSystemTest, UniqueTempPathsDifferAndStayBesideThePath) {
  const std::string a = UniqueTempPath(PathOf("x"));
  const std::string b = UniqueTempPath(PathOf("x"));
  EXPECT_NE(a, b);
  EXPECT_EQ(fs_std::path(a).parent_path(), fs_std::path(dir_));
  EXPECT_THAT(a, HasSubstr(PathOf("x")));
}

TEST_F(FileSystemTest, NthWriteFailsWithNoSpaceAndOnlyThatOne) {
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kAppend, ENOSPC).Nth(2));
  StatusOr<std::unique_ptr<WritableFile>> file = faulty.NewWritableFile(PathOf("a"));
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->Append("one", 3).ok());
  const Status second = (*file)->Append("two", 3);
  EXPECT_EQ(second.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(second.message(), HasSubstr(PathOf("a")));
  EXPECT_TRUE((*file)->Append("three", 5).ok());
  EXPECT_TRUE((*file)->Close().ok());
  EXPECT_EQ(ReadString(PathOf("a")), "onethree") << "the failed write touched nothing";
  EXPECT_EQ(faulty.faults_fired(), 1);
}

TEST_F(FileSystemTest, StickyFaultKeepsFailingAndClearStopsIt) {
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kNewWritableFile, EDQUOT).Sticky());
  EXPECT_EQ(faulty.NewWritableFile(PathOf("a")).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(faulty.NewWritableFile(PathOf("b")).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(faulty.faults_fired(), 2);
  faulty.Clear();
  EXPECT_TRUE(faulty.NewWritableFile(PathOf("c")).ok());
}

TEST_F(FileSystemTest, FaultMatchesOnlyPathsThatContainItsText) {
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kSync, EIO).OnPathsContaining("victim"));
  EXPECT_TRUE(WriteThrough(faulty, PathOf("bystander"), "ok").ok());
  const Status status = WriteThrough(faulty, PathOf("victim"), "ok");
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_THAT(status.message(), HasSubstr(PathOf("victim")));
}

TEST_F(FileSystemTest, WriteBudgetWritesWhatFitsThenRunsOutOfSpace) {
  FaultInjectingFileSystem faulty;
  faulty.SetWriteBudget(5);
  const Status status = WriteThrough(faulty, PathOf("a"), "0123456789");
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadString(PathOf("a")), "01234");
}

TEST_F(FileSystemTest, RenameFaultMatchesTheDestinationAndMovesNothing) {
  WriteString(PathOf("from"), "x");
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kRename, EIO).OnPathsContaining("/to"));
  EXPECT_EQ(faulty.Rename(PathOf("from"), PathOf("to")).code(), StatusCode::kIoError);
  EXPECT_EQ(Listing(), std::vector<std::string>{"from"});
  EXPECT_TRUE(faulty.Rename(PathOf("from"), PathOf("other")).ok());
}

TEST_F(FileSystemTest, FailedCloseStillClosesTheFile) {
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kClose, EIO));
  StatusOr<std::unique_ptr<WritableFile>> file = faulty.NewWritableFile(PathOf("a"));
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Append("abc", 3).ok());
  EXPECT_EQ((*file)->Close().code(), StatusCode::kIoError);
  EXPECT_EQ(ReadString(PathOf("a")), "abc");
}

TEST_F(FileSystemTest, NoSpaceDuringAtomicWriteKeepsTheOldFileAndNoTemporary) {
  const std::string path = PathOf("a.txt");
  WriteString(path, "old");
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kAppend, ENOSPC).Nth(2));
  const std::string_view pieces[] = {"first piece ", "second piece"};
  const Status status = WriteFileAtomically(faulty, path, pieces);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadString(path), "old");
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.txt"});
}

TEST_F(FileSystemTest, ReadFaultReachesFilesOpenedThroughTheWrapper) {
  WriteString(PathOf("a"), "abc");
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kRead, EIO));
  const Status status = ReadFileToString(faulty, PathOf("a")).status();
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_THAT(status.message(), HasSubstr(PathOf("a")));
}

}  // namespace
}  // namespace hoist
