// Token files, token windows and the byte tokenizer (include/edp/data/tokens.h): round trips at
// each token width, the header checks (messages name the file and byte offset), the windows'
// inputs and next-token targets, their batches through the DataLoader, and — through
// DistributedLoader — every window seen exactly once per epoch across changes of world size in
// the middle of an epoch (the in-place rescale's re-sharding) and across a save/restore at
// another world size.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "edp/data/distributed_loader.h"
#include "edp/data/loader.h"
#include "edp/data/tokens.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;
using edp_test::TempDir;

namespace {
// Tokens 0, 1, ..., n-1 (a vocabulary of n): every window is identified by its first token.
std::shared_ptr<TokenFile> counting_file(const TempDir& dir, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  const std::string path = dir.file("count.tok");
  write_token_file(path, ids, n);
  return std::make_shared<TokenFile>(path);
}
}  // namespace

TEST(Tokens, RoundTripAtEveryWidth) {
  TempDir dir;
  for (int64_t vocab : {256, 300, 70000}) {
    SCOPED_TRACE(vocab);
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < 1000; ++i) ids.push_back(static_cast<int32_t>((i * 7919) % vocab));
    ids.push_back(static_cast<int32_t>(vocab - 1));
    write_token_file(dir.file("t.tok"), ids, vocab);
    TokenFile f(dir.file("t.tok"));
    EXPECT_EQ(f.size(), 1001);
    EXPECT_EQ(f.vocab(), vocab);
    EXPECT_EQ(f.bytes_per_token(), vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4);
    std::vector<int32_t> back(ids.size());
    f.read(0, f.size(), back.data());
    EXPECT_EQ(back, ids);
  }
  EXPECT_THROW(write_token_file(dir.file("bad.tok"), {1, 256}, 256), Error);
}

TEST(Tokens, DamagedFilesAreRefusedWithTheByteOffset) {
  TempDir dir;
  write_token_file(dir.file("t.tok"), {1, 2, 3, 4}, 256);
  auto bytes = edp_test::read_all(dir.file("t.tok"));
  auto truncated = bytes;
  truncated.pop_back();
  edp_test::write_plain(dir.file("short.tok"), truncated);
  EXPECT_THROW_WITH(TokenFile(dir.file("short.tok")), DataError, "short.tok", "byte 16", "4 tokens");
  auto magic = bytes;
  magic[0] = 'X';
  edp_test::write_plain(dir.file("magic.tok"), magic);
  EXPECT_THROW_WITH(TokenFile(dir.file("magic.tok")), DataError, "magic.tok", "byte 0");
  auto width = bytes;
  width[8] = 3;
  edp_test::write_plain(dir.file("width.tok"), width);
  EXPECT_THROW_WITH(TokenFile(dir.file("width.tok")), DataError, "byte 8", "3 bytes per token");
  auto vocab = bytes;
  vocab[12] = 3;  // vocabulary 3 but tokens up to 4
  vocab[13] = 0;
  edp_test::write_plain(dir.file("vocab.tok"), vocab);
  // Refused when the file is opened (every id is checked there), naming the first id outside the
  // vocabulary and its byte offset, not when a window holding it is trained on.
  EXPECT_THROW_WITH(TokenFile(dir.file("vocab.tok")), DataError, "vocab.tok", "byte 26", "token 2 is 3");
  EXPECT_THROW_WITH(TokenFile(dir.file("missing.tok")), DataError, "missing.tok");
}

TEST(Tokens, WindowsHoldTheInputsAndTheNextTokens) {
  TempDir dir;
  auto f = counting_file(dir, 23);
  TokenWindows w(f, 5);  // windows start at 0, 5, 10, 15 (the last needs tokens up to 20 < 23)
  EXPECT_EQ(w.size(), 4);
  EXPECT_EQ(w.sample_shape(), Shape({5}));
  EXPECT_EQ(w.label_shape(), Shape({5}));
  std::vector<int32_t> x(5), y(5);
  w.get_sample(3, x.data(), y.data());
  EXPECT_EQ(x, (std::vector<int32_t>{15, 16, 17, 18, 19}));
  EXPECT_EQ(y, (std::vector<int32_t>{16, 17, 18, 19, 20}));
  TokenWindows overlapping(f, 5, 2);  // starts 0, 2, ..., 16
  EXPECT_EQ(overlapping.size(), 9);
  EXPECT_THROW(TokenWindows(f, 23), DataError);  // 23 tokens hold no window of 24
  float unused[5];
  EXPECT_THROW(w.get(0, unused), Error);

  DataLoader loader(std::make_shared<TokenWindows>(f, 5), std::make_shared<SequentialSampler>(4), {.batch_size = 3});
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.x.dtype(), DType::I32);
  EXPECT_EQ(b.x.shape(), Shape({3, 5}));
  EXPECT_EQ(b.y.shape(), Shape({3, 5}));
  EXPECT_EQ(b.x.item(5), 5);
  EXPECT_EQ(b.y.item(14), 15);
}

TEST(Tokens, ByteTokenizerIsLossless) {
  const std::string text = "Fortune favours the bold.\nUTF-8: \xc3\xa9t\xc3\xa9\n";
  const auto ids = ByteTokenizer::encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'F');
  EXPECT_EQ(ids[text.size() - 2], 0xa9);
  EXPECT_EQ(ByteTokenizer::decode(ids), text);
  EXPECT_THROW(ByteTokenizer::decode({65, 256}), Error);
}

TEST(Tokens, EveryWindowOnceAcrossWorldSizeChangesAndARestore) {
  // 203 windows of 8; per-rank batch 5. Epoch 0: 3 steps at 2 ranks, grow to 3 ranks (in place:
  // reshard), 4 steps, shrink to 1 rank, then save the position and restore it into a fresh
  // loader at 4 ranks with batch 7 (a restart at another size), which finishes the epoch.
  // Epoch 1 runs at 2 ranks. Every window must be seen exactly once in each epoch.
  TempDir dir;
  auto f = counting_file(dir, 203 * 8 + 1);
  auto windows = std::make_shared<TokenWindows>(f, 8);
  ASSERT_EQ(windows->size(), 203);
  std::map<int64_t, std::vector<int>> seen;  // epoch -> count per window
  auto take = [&](std::vector<std::unique_ptr<DistributedLoader>>& ranks, int64_t steps) {
    for (int64_t s = 0; s < steps || steps < 0; ++s) {
      bool any = false;
      for (auto& l : ranks) {
        DistributedLoader::Step st;
        if (!l->next(st)) continue;
        any = true;
        auto& v = seen[l->epoch()];
        v.resize(203);
        for (int64_t r = 0; r < st.batch.size(); ++r) {
          // The window's identity from its contents: first token / 8.
          const int64_t idx = static_cast<int64_t>(st.batch.x.item(r * 8)) / 8;
          EXPECT_EQ(idx, st.batch.indices[static_cast<size_t>(r)]);
          EXPECT_EQ(st.batch.y.item(r * 8 + 7), idx * 8 + 8);
          ++v[static_cast<size_t>(idx)];
        }
      }
      if (!any) break;
    }
  };
  auto make = [&](int world, int64_t batch) {
    std::vector<std::unique_ptr<DistributedLoader>> r;
    for (int k = 0; k < world; ++k) r.push_back(std::make_unique<DistributedLoader>(windows, 17, world, k, batch));
    return r;
  };
  auto ranks = make(2, 5);
  for (auto& l : ranks) l->start_epoch(0);
  take(ranks, 3);
  // Grow to 3: every rank (old and new) continues from the same position.
  SamplerState s = ranks.front()->sampler().state();
  ranks = make(3, 5);
  for (auto& l : ranks) {
    l->load_state(s);
    l->start_epoch(0);
  }
  take(ranks, 4);
  // Shrink to 1 in place.
  s = ranks.front()->sampler().state();
  ranks.resize(1);
  ranks.front()->reshard(1, 0, 5);
  take(ranks, 2);
  // Restart at 4 ranks, batch 7, from the saved position.
  s = ranks.front()->sampler().state();
  ranks = make(4, 7);
  for (auto& l : ranks) {
    l->load_state(s);
    l->start_epoch(0);
  }
  take(ranks, -1);
  ranks = make(2, 5);
  for (auto& l : ranks) l->start_epoch(1);
  take(ranks, -1);
  ASSERT_EQ(seen.size(), 2u);
  for (auto& [epoch, v] : seen)
    for (int64_t i = 0; i < 203; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], 1) << "epoch " << epoch << " window " << i;
}
