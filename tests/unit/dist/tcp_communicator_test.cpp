#include "dist/tcp_communicator.h"

#include <gtest/gtest.h>

#include <random>

#include "multi_process.h"

namespace fp4 {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;

// Rank r's input of a collective: a pure function of (seed, rank), so every rank can recompute all.
std::vector<float> input_of(uint64_t seed, int rank, int64_t n) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(rank));
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

// Random disjoint ranges over [lo, hi), one per rank, some possibly empty.
std::vector<IndexRange> random_ranges(std::mt19937_64& rng, int world, int64_t lo, int64_t hi) {
  std::vector<int64_t> cuts{lo, hi};
  for (int i = 1; i < world; ++i)
    cuts.push_back(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<IndexRange> out;
  for (int i = 0; i < world; ++i)
    out.push_back({cuts[static_cast<size_t>(i)], cuts[static_cast<size_t>(i) + 1]});
  std::shuffle(out.begin(), out.end(), rng);  // owners need not be in buffer order
  return out;
}

TcpCommunicator connect(const DistEnv& env) {
  return TcpCommunicator(env, 5000ms, 5000ms);
}

TEST(TcpCommunicator, AllReduceSumsInRankOrderForEveryType) {
  for (int world : {1, 2, 3, 4}) {
    const uint64_t seed = std::random_device{}();
    const int64_t n = 1 + static_cast<int64_t>(seed % 5000);  // odd sizes too
    const auto codes = run_ranks(world, [&](const DistEnv& env) {
      auto comm = connect(env);
      if (comm.rank() != env.rank || comm.world_size() != world) return 1;
      std::vector<float> f = input_of(seed, env.rank, n);
      std::vector<double> d(f.begin(), f.end());
      std::vector<int64_t> i(f.size());
      for (size_t k = 0; k < f.size(); ++k) i[k] = static_cast<int64_t>(f[k] * 1e6) + (int64_t{1} << 40);
      comm.all_reduce_sum(f.data(), n, CommType::kF32);
      comm.all_reduce_sum(d.data(), n, CommType::kF64);
      comm.all_reduce_sum(i.data(), n, CommType::kI64);
      comm.all_reduce_sum(nullptr, 0, CommType::kF32);
      std::vector<float> ef = input_of(seed, 0, n);
      std::vector<double> ed(ef.begin(), ef.end());
      std::vector<int64_t> ei(ef.size());
      for (size_t k = 0; k < ef.size(); ++k) ei[k] = static_cast<int64_t>(ef[k] * 1e6) + (int64_t{1} << 40);
      for (int r = 1; r < world; ++r) {
        const auto x = input_of(seed, r, n);
        for (size_t k = 0; k < x.size(); ++k) {
          ef[k] += x[k];
          ed[k] += static_cast<double>(x[k]);
          ei[k] += static_cast<int64_t>(x[k] * 1e6) + (int64_t{1} << 40);
        }
      }
      return f == ef && d == ed && i == ei ? 0 : 1;  // bit-exact: the order is fixed
    });
    for (int r = 0; r < world; ++r)
      EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "world " << world << " rank " << r;
  }
}

TEST(TcpCommunicator, ReduceScatterAndAllGatherOfUnevenRanges) {
  for (int world : {2, 3, 4}) {
    const uint64_t seed = std::random_device{}();
    const auto codes = run_ranks(world, [&](const DistEnv& env) {
      auto comm = connect(env);
      std::mt19937_64 rng(seed);  // the same ranges on every rank
      for (int round = 0; round < 6; ++round) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 3001);
        // A sub-range of the buffer (a gradient bucket), or all of it.
        const int64_t lo = round % 2 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(n)) : 0;
        const int64_t hi =
            round % 2 ? lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - lo + 1)) : n;
        const auto ranges = random_ranges(rng, world, lo, hi);
        const uint64_t s = seed + static_cast<uint64_t>(round);
        std::vector<float> x = input_of(s, env.rank, n);
        comm.reduce_scatter_sum(x.data(), ranges);
        const IndexRange mine = ranges[static_cast<size_t>(env.rank)];
        std::vector<float> sum = input_of(s, 0, n);
        for (int r = 1; r < world; ++r) {
          const auto y = input_of(s, r, n);
          for (int64_t k = 0; k < n; ++k) sum[static_cast<size_t>(k)] += y[static_cast<size_t>(k)];
        }
        for (int64_t k = mine.begin; k < mine.end; ++k)
          if (x[static_cast<size_t>(k)] != sum[static_cast<size_t>(k)]) return 1;

        std::vector<float> g = input_of(s + 77, env.rank, n);
        const std::vector<float> before = g;
        comm.all_gather(g.data(), ranges);
        for (int q = 0; q < world; ++q) {
          const auto src = input_of(s + 77, q, n);
          const IndexRange r = ranges[static_cast<size_t>(q)];
          for (int64_t k = r.begin; k < r.end; ++k)
            if (g[static_cast<size_t>(k)] != src[static_cast<size_t>(k)]) return 4;
        }
        // Elements outside every range are left alone.
        for (int64_t k = 0; k < n; ++k)
          if ((k < lo || k >= hi) && g[static_cast<size_t>(k)] != before[static_cast<size_t>(k)]) return 5;
      }
      comm.barrier();
      return 0;
    });
    for (int r = 0; r < world; ++r)
      EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "world " << world << " rank " << r;
  }
}

TEST(TcpCommunicator, DifferentCollectivesOnTwoRanksAreAnErrorNotAHang) {
  const auto codes = run_ranks(2, [](const DistEnv& env) {
    auto comm = connect(env);
    try {
      if (env.rank == 0) {
        float x = 1;
        comm.all_reduce_sum(&x, 1, CommType::kF32);
      } else {
        comm.barrier();
      }
    } catch (const Error& e) {
      const std::string m = e.what();
      return m.find("all_reduce_sum") != std::string::npos ||
                     m.find("closed the connection") != std::string::npos
                 ? 7
                 : 8;
    }
    return 0;
  });
  // Rank 0 sees the mismatch; rank 1 then sees rank 0 gone (or the mismatch itself).
  EXPECT_EQ(codes[0], 7);
  EXPECT_EQ(codes[1], 7);
}

TEST(TcpCommunicator, DeadPeerIsAnErrorNamingTheRank) {
  const auto codes = run_ranks(3, [](const DistEnv& env) {
    auto comm = connect(env);
    if (env.rank == 2) ::_exit(0);  // leaves without taking part
    try {
      std::vector<float> x(10, 1.0f);
      comm.all_reduce_sum(x.data(), 10, CommType::kF32);
    } catch (const Error& e) {
      const std::string m = e.what();
      return m.find("rank " + std::to_string(env.rank) + " of 3") != std::string::npos ? 7 : 8;
    }
    return 0;
  });
  EXPECT_EQ(codes[0], 7);
  EXPECT_EQ(codes[1], 7);
  EXPECT_EQ(codes[2], 0);
}

TEST(TcpCommunicator, WrongRangeCountAndSizeMismatchAreErrors) {
  const auto codes = run_ranks(2, [](const DistEnv& env) {
    auto comm = connect(env);
    std::vector<float> x(8, 1.0f);
    const IndexRange one[1] = {{0, 8}};
    try {
      comm.all_gather(x.data(), one);
      return 1;
    } catch (const Error& e) {
      if (std::string(e.what()).find("1 ranges for 2 ranks") == std::string::npos) return 1;
    }
    try {
      comm.all_reduce_sum(x.data(), env.rank == 0 ? 8 : 4, CommType::kF32);
    } catch (const Error& e) {
      return std::string(e.what()).find("bytes") != std::string::npos ||
                     std::string(e.what()).find("closed") != std::string::npos
                 ? 7
                 : 8;
    }
    return 0;
  });
  EXPECT_EQ(codes[0], 7);
  EXPECT_EQ(codes[1], 7);
}

}  // namespace
}  // namespace fp4
