// attnkit render: pictures of any attention .npy (ours, or numpy's from a PyTorch / HuggingFace
// model), or of a whole run folder. The drawing is in tools/render/ (render_file.h).
#include <cstdio>
#include <filesystem>

#include <fmt/core.h>

#include "engine/error.h"
#include "tools/commands.h"
#include "tools/render/render_file.h"
#include "tools/run_folder.h"

namespace attnkit::cli {
namespace fs = std::filesystem;

int run_render(const RenderArgs& r) {
  if (fs::is_directory(r.input)) {
    for (const auto* flag : {&r.tokens, &r.query_tokens, &r.title})
      if (!flag->empty()) throw UsageError("--tokens, --query-tokens and --title apply to an .npy file, not a run folder");
    if (r.layer >= 0 || r.head >= 0 || r.index >= 0)
      throw UsageError("--layer, --head and --index apply to an .npy file, not a run folder");
    const std::string ext = fs::path(r.out).extension().string();
    if (ext == ".png" || ext == ".svg" || ext == ".html")
      throw UsageError("--out " + r.out + ": a run folder is drawn into a folder (pictures + report.html), not one file");
    render::RunRenderOptions o;
    o.scale = r.scale;
    o.map = render::colormap_from_name(r.colormap);
    const std::string out = r.out.empty() ? r.input : r.out;
    // The pictures join the files of --out: another run's folder would end up with two runs'.
    std::error_code ec;
    if (!r.out.empty() && !fs::equivalent(r.input, r.out, ec)) {
      const std::string other = run_file_in(r.out);
      if (!other.empty())
        throw UsageError("--out " + r.out + " is another run's folder (it holds " + other + "): " + r.input +
                         "'s pictures would be mixed with its files; give a new or empty folder, or leave --out out");
    }
    const RunContents contents = read_run_folder(r.input);
    // The pictures join the folder's other files as one new version of it.
    RunFolderWriter writer(out, "attnkit render " + r.input);
    const std::string& staging = writer.begin();
    std::vector<std::string> written;
    std::string error, skipped;
    if (!draw_pictures(contents, staging, &written, &error, o, &skipped))
      throw Error("pictures not drawn: " + writer.in_folder_terms(error) + " (" + out + " is unchanged)");
    if (!skipped.empty()) std::fprintf(stderr, "warning: %s\n", skipped.c_str());
    writer.commit(CarryOver::kAll);
    std::string names;
    for (const auto& n : written) names += (names.empty() ? "" : ", ") + n;
    fmt::print("wrote {}/: {}\n", out, names);
    return 0;
  }
  if (r.out.empty()) throw UsageError("--out FILE.png|FILE.svg|FILE.html is required for an .npy input");
  render::RenderRequest q;
  q.input = r.input, q.output = r.out;
  q.key_tokens = render::split_tokens(r.tokens);
  q.query_tokens = render::split_tokens(r.query_tokens);
  if (!r.query_tokens.empty() && r.tokens.empty()) throw UsageError("--query-tokens needs --tokens (the keys) too");
  q.layer = r.layer, q.head = r.head, q.index = r.index;
  q.view = r.view, q.title = r.title;
  q.decimals = r.values == "auto" ? -1 : r.values == "none" ? 0 : std::stoi(r.values);
  q.map = render::colormap_from_name(r.colormap);
  q.scale = r.scale;
  std::vector<std::string> warnings;
  try {
    warnings = render::render_attention_file(q);
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {
    // Token counts, layer/head ranges and formats are usage errors: the command line was wrong.
    const std::string what = e.what();
    if (what.rfind("--", 0) == 0) throw UsageError(what);
    throw;
  }
  for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  fmt::print("wrote {}\n", r.out);
  return 0;
}

}  // namespace attnkit::cli
