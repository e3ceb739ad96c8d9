// sparrow: the command-line tool. Subcommands are registered from one file each.
#include <cstdio>
#include <string>

#include "sparrow/dispatch.hpp"
#include "sparrow/version.hpp"
#include "sparrow/commands.hpp"  // tools/sparrow/commands.hpp

int main(int argc, char** argv) {
  CLI::App app{"sparrow: sparse weights for pruned-LLM inference on NVIDIA GPUs"};
  app.set_version_flag("--version", std::string("sparrow ") + sparrow::kVersion + " (git " +
                                        sparrow::git_revision() + ")");
  app.require_subcommand(1);
  for (int i = 0; i < argc; ++i) {
    sparrow::cli::command_line() += (i ? " " : "") + std::string(argv[i]);
  }
  int exit_code = 0;
  sparrow::cli::register_formats(app, exit_code);
  sparrow::cli::register_run(app, exit_code);
  sparrow::cli::register_perplexity(app, exit_code);
  sparrow::cli::register_bench_model(app, exit_code);
  sparrow::cli::register_calibrate(app, exit_code);
  sparrow::cli::register_synth(app, exit_code);
  sparrow::cli::register_prune(app, exit_code);
  sparrow::cli::register_bench(app, exit_code);
  // Every command that plans or runs matmuls reads the rule tables: a SPARROW_RULE_TABLE_GPU that
  // names no shipped table stops it before any work (after --help and --version, which need none).
  app.parse_complete_callback([] {
    if (auto s = sparrow::rule_table_env_status(); !s.ok()) {
      std::fprintf(stderr, "sparrow: %s\n", s.message().c_str());
      throw CLI::RuntimeError(sparrow::cli::kExitBadArgs);
    }
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // the message is printed already
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "sparrow: %s (see sparrow --help)\n", e.what());
    return sparrow::cli::kExitBadArgs;
  }
  return exit_code;
}
