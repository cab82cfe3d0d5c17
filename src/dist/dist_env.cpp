#include "dist/dist_env.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace fp4 {
namespace {

struct Found {
  std::string name;  // the variable that supplied the value
  std::string value;
};

// The first of the names that is set.
std::optional<Found> first_set(const EnvLookup& lookup, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = lookup(n)) return Found{n, *v};
  return std::nullopt;
}

// The variables each launcher sets, in the order they are trusted.
struct Launcher {
  const char* name;
  const char* rank;
  const char* world;
  const char* local;
};

constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"MPICH / PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

int parse_int(const Found& f) {
  const char* s = f.value.c_str();
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  FP4_CHECK(!f.value.empty() && end && *end == '\0' && errno == 0 && v >= std::numeric_limits<int>::min() &&
                v <= std::numeric_limits<int>::max(),
            "environment variable ", f.name, "='", f.value, "' is not an integer");
  return static_cast<int>(v);
}

}  // namespace

DistEnv parse_dist_env(const EnvLookup& lookup) {
  DistEnv env;
  // The first launcher whose rank or size variable is set supplies all three numbers, so a job started by
  // mpirun or torchrun inside a Slurm allocation (whose SLURM_* variables every child inherits) is read
  // from its own launcher.
  const Launcher* from = nullptr;
  for (const Launcher& l : kLaunchers)
    if (lookup(l.rank) || lookup(l.world)) {
      from = &l;
      break;
    }
  if (from == nullptr) return env;  // a plain single-process run
  const auto rank = first_set(lookup, {from->rank});
  const auto world = first_set(lookup, {from->world});
  FP4_CHECK(rank, "environment variable ", from->rank, " is not set but ", from->world, " is (", from->name,
            ")");
  FP4_CHECK(world, "environment variable ", from->world, " is not set but ", from->rank, " is (", from->name,
            ")");
  env.launched = true;
  env.rank = parse_int(*rank);
  env.world_size = parse_int(*world);
  FP4_CHECK(env.world_size >= 1, "environment variable ", world->name, "=", env.world_size, " must be >= 1");
  FP4_CHECK(env.rank >= 0 && env.rank < env.world_size, "environment variable ", rank->name, "=", env.rank,
            " is outside [0, ", env.world_size, ") given by ", world->name);

  const auto local = first_set(lookup, {from->local});
  if (env.world_size > 1)
    FP4_CHECK(local, "environment variable ", from->local, " is not set (", rank->name, "=", env.rank, ", ",
              world->name, "=", env.world_size, ", ", from->name, ")");
  if (local) {
    env.local_rank = parse_int(*local);
    FP4_CHECK(env.local_rank >= 0 && env.local_rank < env.world_size, "environment variable ", local->name,
              "=", env.local_rank, " is outside [0, ", env.world_size, ") given by ", world->name);
  }

  const auto addr = first_set(lookup, {"MASTER_ADDR"});
  const auto port = first_set(lookup, {"MASTER_PORT"});
  if (env.world_size > 1) {
    FP4_CHECK(addr, "environment variable MASTER_ADDR is not set (needed for ", env.world_size,
              " processes)");
    FP4_CHECK(port, "environment variable MASTER_PORT is not set (needed for ", env.world_size,
              " processes)");
  }
  if (addr) {
    FP4_CHECK(!addr->value.empty(), "environment variable MASTER_ADDR is empty");
    env.master_addr = addr->value;
  }
  if (port) {
    env.master_port = parse_int(*port);
    FP4_CHECK(env.master_port >= 1 && env.master_port <= 65535,
              "environment variable MASTER_PORT=", env.master_port, " is not a TCP port (1..65535)");
  }
  return env;
}

DistEnv dist_env_from_process() {
  return parse_dist_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace fp4
