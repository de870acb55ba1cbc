// The knob registry: defaults, typed reads, errors that name the variable, value and expectation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include "edp/core/error.h"
#include "edp/core/knobs.h"

namespace k = edp::knobs;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const edp::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Knobs, NamesAreUniqueAndPrefixed) {
  std::set<std::string> seen;
  for (const auto& kn : k::all()) {
    EXPECT_EQ(std::string(kn.name).rfind("EDP_", 0), 0u) << kn.name;
    EXPECT_TRUE(seen.insert(kn.name).second) << kn.name << " is defined twice";
    EXPECT_GT(std::string(kn.help).size(), 10u) << kn.name;
  }
}

TEST(Knobs, DefaultsParse) {
  for (const auto& kn : k::all()) {
    if (!*kn.def || k::is_set(kn.name)) continue;
    switch (kn.type) {
      case k::Type::Bool: (void)k::get_bool(kn.name); break;
      case k::Type::Int: (void)k::get_int(kn.name); break;
      case k::Type::Double: (void)k::get_double(kn.name); break;
      default: EXPECT_EQ(k::get_string(kn.name), kn.def); break;
    }
  }
}

TEST(Knobs, TypedReadsAndErrors) {
  unsetenv("EDP_HOST_CACHE_MB");
  EXPECT_EQ(k::get_int("EDP_HOST_CACHE_MB"), 2048);
  setenv("EDP_HOST_CACHE_MB", "16", 1);
  EXPECT_EQ(k::get_int("EDP_HOST_CACHE_MB"), 16);
  setenv("EDP_HOST_CACHE_MB", "lots", 1);
  const std::string e = error_of([] { k::get_int("EDP_HOST_CACHE_MB"); });
  EXPECT_NE(e.find("EDP_HOST_CACHE_MB='lots'"), std::string::npos) << e;
  EXPECT_NE(e.find("an integer >= 0"), std::string::npos) << e;
  unsetenv("EDP_HOST_CACHE_MB");

  setenv("EDP_CUDA_SYNC", "yes", 1);
  EXPECT_TRUE(k::get_bool("EDP_CUDA_SYNC"));
  setenv("EDP_CUDA_SYNC", "maybe", 1);
  EXPECT_NE(error_of([] { k::get_bool("EDP_CUDA_SYNC"); }).find("EDP_CUDA_SYNC='maybe'"), std::string::npos);
  unsetenv("EDP_CUDA_SYNC");
  EXPECT_FALSE(k::get_bool("EDP_CUDA_SYNC"));

  setenv("EDP_COMM_THREAD_LEVEL", "many", 1);
  EXPECT_NE(error_of([] { k::get_string("EDP_COMM_THREAD_LEVEL"); }).find("one of single,funneled"),
            std::string::npos);
  setenv("EDP_COMM_THREAD_LEVEL", "funneled", 1);
  EXPECT_EQ(k::get_string("EDP_COMM_THREAD_LEVEL"), "funneled");
  unsetenv("EDP_COMM_THREAD_LEVEL");

  EXPECT_EQ(k::get_int("EDP_COMM_MAX_CHUNK", 77), 77);
  EXPECT_NE(error_of([] { k::get_bool("EDP_NOT_A_KNOB"); }).find("no knob EDP_NOT_A_KNOB"), std::string::npos);
  EXPECT_NE(error_of([] { k::get_bool("EDP_HOST_CACHE_MB"); }).find("is a int"), std::string::npos);
}

// A number knob takes a finite number in its range: EDP_SPAWN_TIMEOUT=abc, -1 or nan is refused,
// and check_environment() (what edprun and elastic::Job call when they start) refuses it at once
// rather than at the first grow, naming the variable and what it expects.
TEST(Knobs, MalformedValuesAreRefusedWhenTheProgramStarts) {
  for (const char* v : {"abc", "-1", "nan", "inf", "5s"}) {
    setenv("EDP_SPAWN_TIMEOUT", v, 1);
    const std::string e = error_of([] { k::check_environment(); });
    EXPECT_NE(e.find(std::string("EDP_SPAWN_TIMEOUT='") + v + "' is not valid: expected a finite number >= 0"),
              std::string::npos)
        << v << ": " << e;
    EXPECT_NE(error_of([] { k::get_double("EDP_SPAWN_TIMEOUT"); }), "") << v;
  }
  setenv("EDP_SPAWN_TIMEOUT", "0.5", 1);
  EXPECT_EQ(error_of([] { k::check_environment(); }), "");
  EXPECT_DOUBLE_EQ(k::get_double("EDP_SPAWN_TIMEOUT"), 0.5);
  unsetenv("EDP_SPAWN_TIMEOUT");
  setenv("EDP_BACKGROUND_GROW", "perhaps", 1);
  EXPECT_NE(error_of([] { k::check_environment(); }).find("EDP_BACKGROUND_GROW='perhaps'"), std::string::npos);
  unsetenv("EDP_BACKGROUND_GROW");
}

TEST(Knobs, OmpiWorld) {
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_FALSE(k::ompi_world().present());
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  const k::OmpiWorld w = k::ompi_world();
  EXPECT_TRUE(w.present());
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.size, 4);
  setenv("OMPI_COMM_WORLD_SIZE", "x", 1);
  EXPECT_NE(error_of([] { k::ompi_world(); }).find("OMPI_COMM_WORLD_SIZE='x'"), std::string::npos);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST(Knobs, MarkdownListsEveryKnob) {
  const std::string md = k::markdown();
  for (const auto& kn : k::all()) EXPECT_NE(md.find(std::string("`") + kn.name + "`"), std::string::npos) << kn.name;
}
