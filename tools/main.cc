// stepcast command line. Subcommands are added as the library grows.
#include <iostream>

#include <CLI/CLI.hpp>

#include "model/error.h"

int main(int argc, char** argv) {
  CLI::App app{"stepcast: predict one training step of a large model on a GPU cluster"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
