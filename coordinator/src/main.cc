// tccd: flags and config -> server. The only code no test reaches.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tccd: TCC (Try-Confirm-Cancel) transaction coordinator"};
  std::string config_path = "config/tccd.yaml";
  bool version = false;
  app.add_option("--config", config_path, "path to tccd.yaml");
  app.add_flag("--version", version, "print the version and exit");
  CLI11_PARSE(app, argc, argv);
  std::printf("tccd %s\n", TCC_VERSION);
  if (version) return 0;
  std::printf("config: %s\n", config_path.c_str());
  std::printf("the daemon is not built yet (issue 6); exiting\n");
  return 0;
}
