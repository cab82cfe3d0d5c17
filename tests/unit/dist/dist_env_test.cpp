#include "dist/dist_env.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"

namespace fp4 {
namespace {

using Vars = std::map<std::string, std::string>;

DistEnv parse(const Vars& vars) {
  return parse_dist_env([&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// The message of the fp4::Error that parsing vars throws.
std::string error_for(const Vars& vars) {
  try {
    parse(vars);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an fp4::Error";
  return "";
}

const Vars kTorchrun = {{"RANK", "5"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"MASTER_ADDR", "10.0.0.7"},
                        {"MASTER_PORT", "29511"}};

TEST(DistEnv, EmptyEnvironmentIsASingleProcessJob) {
  const auto env = parse({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
}

TEST(DistEnv, ReadsTorchrunVariables) {
  const auto env = parse(kTorchrun);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 29511);
}

TEST(DistEnv, FallsBackToSlurmAndPrefersTorchrun) {
  const Vars slurm = {{"SLURM_PROCID", "3"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_LOCALID", "3"},
                      {"MASTER_ADDR", "node1"},
                      {"MASTER_PORT", "1234"}};
  const auto env = parse(slurm);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.master_addr, "node1");

  Vars both = slurm;
  both.insert(kTorchrun.begin(), kTorchrun.end());
  const auto mixed = parse(both);
  EXPECT_EQ(mixed.rank, 5);
  EXPECT_EQ(mixed.world_size, 8);
  EXPECT_EQ(mixed.local_rank, 1);
}

TEST(DistEnv, SingleRankNeedsNoMaster) {
  const auto env = parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.master_port, 29500);
}

TEST(DistEnv, MissingVariablesAreNamed) {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    Vars vars = kTorchrun;
    vars.erase(name);
    EXPECT_NE(error_for(vars).find(name), std::string::npos) << name << ": " << error_for(vars);
  }
}

TEST(DistEnv, BadValuesAreNamed) {
  const std::pair<const char*, const char*> bad[] = {{"RANK", "8"},
                                                     {"RANK", "-1"},
                                                     {"RANK", "two"},
                                                     {"WORLD_SIZE", "0"},
                                                     {"WORLD_SIZE", "5"},
                                                     {"LOCAL_RANK", "8"},
                                                     {"LOCAL_RANK", "-2"},
                                                     {"MASTER_PORT", "0"},
                                                     {"MASTER_PORT", "70000"},
                                                     {"MASTER_PORT", "29500x"},
                                                     {"MASTER_ADDR", ""},
                                                     {"WORLD_SIZE", ""},
                                                     {"RANK", "99999999999"}};
  for (const auto& [name, value] : bad) {
    Vars vars = kTorchrun;
    vars[name] = value;
    const auto msg = error_for(vars);
    EXPECT_NE(msg.find(name), std::string::npos) << name << "=" << value << ": " << msg;
  }
}

TEST(DistEnv, SlurmErrorsNameTheSlurmVariable) {
  const Vars vars = {{"SLURM_PROCID", "4"},
                     {"SLURM_NTASKS", "4"},
                     {"SLURM_LOCALID", "0"},
                     {"MASTER_ADDR", "a"},
                     {"MASTER_PORT", "1"}};
  EXPECT_NE(error_for(vars).find("SLURM_PROCID"), std::string::npos);
}

TEST(DistEnv, ReadsOpenMpiAndMpichVariables) {
  const auto ompi = parse({{"OMPI_COMM_WORLD_RANK", "6"},
                           {"OMPI_COMM_WORLD_SIZE", "16"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                           {"MASTER_ADDR", "h0"},
                           {"MASTER_PORT", "4000"}});
  EXPECT_TRUE(ompi.launched);
  EXPECT_EQ(ompi.rank, 6);
  EXPECT_EQ(ompi.world_size, 16);
  EXPECT_EQ(ompi.local_rank, 2);
  const auto pmi = parse({{"PMI_RANK", "1"},
                          {"PMI_SIZE", "3"},
                          {"MPI_LOCALRANKID", "1"},
                          {"MASTER_ADDR", "h0"},
                          {"MASTER_PORT", "4000"}});
  EXPECT_EQ(pmi.rank, 1);
  EXPECT_EQ(pmi.world_size, 3);
  EXPECT_EQ(pmi.local_rank, 1);
}

// mpirun inside a Slurm allocation: every rank inherits the batch step's SLURM_PROCID=0, so the MPI launcher
// must win, and its numbers are never mixed with Slurm's.
TEST(DistEnv, MpiInsideSlurmIsReadFromMpiAlone) {
  Vars vars = {{"SLURM_PROCID", "0"},         {"SLURM_NTASKS", "1"},
               {"SLURM_LOCALID", "0"},        {"OMPI_COMM_WORLD_RANK", "3"},
               {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
               {"MASTER_ADDR", "h0"},         {"MASTER_PORT", "4000"}};
  const auto env = parse(vars);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 3);
  vars.erase("OMPI_COMM_WORLD_LOCAL_RANK");  // SLURM_LOCALID must not stand in for it
  EXPECT_NE(error_for(vars).find("OMPI_COMM_WORLD_LOCAL_RANK"), std::string::npos) << error_for(vars);
  vars.emplace("OMPI_COMM_WORLD_LOCAL_RANK",
               "3");                   // (constructed in place: GCC 12 misreads the assignment as -Wrestrict)
  vars.erase("OMPI_COMM_WORLD_SIZE");  // nor SLURM_NTASKS for the size
  const std::string msg = error_for(vars);
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Open MPI"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4
