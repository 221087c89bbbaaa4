#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "shardload/error.h"

int main(int argc, char** argv) {
  CLI::App app{"shardload: load Hugging Face checkpoints into tensor-parallel x expert-parallel shards"};
  app.require_subcommand(1);
  shardload::cli::add_inspect_command(app);
  shardload::cli::add_make_tiny_command(app);
  shardload::cli::add_plan_command(app);
  shardload::cli::add_load_command(app);
  shardload::cli::add_export_command(app);
  shardload::cli::add_eplb_command(app);
  shardload::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error: usage errors are bad input too.
    std::cerr << "error: " << e.what() << " (run with --help for usage)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
