#include "runtime/memory/memory_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

namespace hoist::runtime {
namespace {

constexpr const char* kOutsidePhases = "outside phases";

int64_t RowTotal(const std::array<int64_t, kNumCategories>& row) {
  int64_t total = 0;
  for (int64_t bytes : row) total += bytes;
  return total;
}

// The places the SVG and the trace show: those that held bytes during a closed phase (a window's
// peak is never below the values at its start or end, so this sees every byte recorded).
std::array<bool, kNumPlaces> PlacesUsed(const std::vector<MemoryPhase>& phases) {
  std::array<bool, kNumPlaces> used{};
  for (const MemoryPhase& phase : phases) {
    for (int p = 0; p < kNumPlaces; ++p) used[p] = used[p] || phase.window.peak_total[p] > 0;
  }
  return used;
}

__attribute__((format(printf, 2, 3))) void Appendf(std::string& out, const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  HOIST_CHECK_GE(n, 0);
  HOIST_CHECK_LT(n, int(sizeof(buffer))) << "SVG element longer than its buffer";
  out.append(buffer, static_cast<size_t>(n));
}

// Length of the well-formed UTF-8 sequence at the start of `text`, 0 if there is none.
size_t Utf8SequenceLength(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  if (lead >= 0xC2 && lead <= 0xDF)
    length = 2;
  else if (lead >= 0xE0 && lead <= 0xEF)
    length = 3;
  else if (lead >= 0xF0 && lead <= 0xF4)
    length = 4;
  if (length == 0 || text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
  }
  if (lead == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
  if (lead == 0xED && byte(1) >= 0xA0) return 0;  // a UTF-16 surrogate
  if (lead == 0xF0 && byte(1) < 0x90) return 0;   // overlong
  if (lead == 0xF4 && byte(1) >= 0x90) return 0;  // beyond U+10FFFF
  return length;
}

// Text for XML character data and attribute values: markup characters escaped, characters XML 1.0
// forbids (control characters, malformed UTF-8) replaced, so any phase name keeps the SVG
// well-formed.
std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default: out += (c < 0x20 && c != '\t' && c != '\n' && c != '\r') ? ' ' : char(c);
      }
      ++i;
      continue;
    }
    const size_t length = Utf8SequenceLength(text.substr(i));
    if (length == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string FormatMicros(int64_t us) {
  char text[32];
  if (us < 1000) {
    std::snprintf(text, sizeof(text), "%lld \xC2\xB5s", static_cast<long long>(us));
  } else if (us < 1000000) {
    std::snprintf(text, sizeof(text), "%.1f ms", static_cast<double>(us) / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.2f s", static_cast<double>(us) / 1e6);
  }
  return text;
}

// The smallest power of two at least `bytes`: with at most eight steps on an axis, every
// multiple of it is a whole number of its unit or a quarter of the next (768 MiB, 1.25 GiB), so
// FormatBytes prints each label exactly.
int64_t AxisStepBytes(int64_t bytes) {
  int64_t step = 1;
  while (step < bytes) step *= 2;
  return step;
}

// FormatBytes without zeros that say nothing: "1.25 GiB", "1.5 GiB", "512 MiB".
std::string AxisBytes(int64_t bytes) {
  std::string text = FormatBytes(bytes);
  const size_t dot = text.find('.'), space = text.find(' ');
  if (dot == std::string::npos || space == std::string::npos || dot > space) return text;
  size_t end = space;
  while (end > dot + 1 && text[end - 1] == '0') --end;
  if (end == dot + 1) end = dot;
  return text.substr(0, end) + text.substr(space);
}

// The smallest of 1, 2, 5, 10, 20, 50, ... that is at least `count`.
int NiceCount(double count) {
  for (int scale = 1;; scale *= 10) {
    for (int multiple : {1, 2, 5}) {
      if (multiple * scale >= count) return multiple * scale;
    }
  }
}

nlohmann::json CategoriesJson(const std::array<int64_t, kNumCategories>& row) {
  nlohmann::json out = nlohmann::json::object();
  for (int c = 0; c < kNumCategories; ++c) out[CategoryName(Category(c))] = row[c];
  return out;
}

// Fixed per category, so that two profiles read alike: param, grad, optimizer, activation, comm,
// workspace.
constexpr const char* kCategoryColors[kNumCategories] = {"#4e79a7", "#f28e2b", "#59a14f",
                                                         "#e15759", "#76b7b2", "#edc948"};

}  // namespace

std::string MemoryPhase::Description() const {
  if (!kind) return name == kOutsidePhases ? "time outside any phase" : name;
  std::string text = PhaseName(*kind);
  if (block >= 0) text += " of block " + std::to_string(block);
  if (step >= 0) text += " in step " + std::to_string(step);
  return text;
}

std::string PeakSentence(const PeakAttribution& peak) {
  std::string text = std::string(PlaceName(peak.place)) + " peak " + FormatBytes(peak.bytes) +
                     " during " + peak.description;
  std::vector<int> order;
  for (int c = 0; c < kNumCategories; ++c) {
    if (peak.by_category[c] > 0) order.push_back(c);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return peak.by_category[a] > peak.by_category[b]; });
  const char* separator = ": ";
  for (int c : order) {
    const double percent = 100.0 * static_cast<double>(peak.by_category[c]) /
                           static_cast<double>(std::max<int64_t>(peak.bytes, 1));
    char share[48];
    if (percent < 0.5) {
      std::snprintf(share, sizeof(share), "%s <1%%", CategoryName(Category(c)));
    } else {
      std::snprintf(share, sizeof(share), "%s %.0f%%", CategoryName(Category(c)), percent);
    }
    text += separator;
    text += share;
    separator = ", ";
  }
  return text;
}

MemoryProfiler::MemoryProfiler(MemoryTracker& tracker)
    : tracker_(tracker), start_time_(std::chrono::steady_clock::now()) {
  open_start_ = tracker_.TakeWindow().current;
}

int64_t MemoryProfiler::NowUs() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start_time_)
      .count();
}

void MemoryProfiler::Close() {
  const MemoryWindow window = tracker_.TakeWindow();
  const int64_t now_us = NowUs();
  // A gap between phases is kept only where memory moved in it: then the next phase starts from
  // where the gap ended and no peak goes unattributed; a quiet gap would only clutter the trace.
  const bool moved = window.peak != open_start_ || window.current != open_start_;
  if (open_ || moved) {
    MemoryPhase phase;
    if (open_) {
      phase.name = std::move(open_->name);
      phase.step = open_->step;
      phase.kind = open_->kind;
      phase.block = open_->block;
    } else {
      phase.name = kOutsidePhases;
    }
    phase.start_us = open_start_us_;
    phase.end_us = now_us;
    phase.start = open_start_;
    phase.end = window.current;
    phase.window = window;
    phases_.push_back(std::move(phase));
  }
  open_.reset();
  open_start_ = window.current;
  open_start_us_ = now_us;
}

void MemoryProfiler::Enter(std::string phase) {
  Close();
  open_ = Open{std::move(phase), -1, std::nullopt, -1};
}

void MemoryProfiler::Enter(int64_t step, Phase kind, int block) {
  Close();
  std::string name = "step " + std::to_string(step) + " " + PhaseName(kind);
  if (block >= 0) name += " block " + std::to_string(block);
  open_ = Open{std::move(name), step, kind, block};
}

void MemoryProfiler::Finish() { Close(); }

std::vector<PeakAttribution> MemoryProfiler::Peaks() const {
  std::vector<PeakAttribution> peaks;
  for (int p = 0; p < kNumPlaces; ++p) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(phases_.size()); ++i) {
      const int64_t bytes = phases_[i].window.peak_total[p];
      if (bytes > 0 && (best < 0 || bytes > phases_[best].window.peak_total[p])) best = i;
    }
    if (best < 0) continue;
    const MemoryPhase& phase = phases_[best];
    PeakAttribution peak;
    peak.place = Place(p);
    peak.bytes = phase.window.peak_total[p];
    peak.phase = phase.name;
    peak.description = phase.Description();
    peak.phase_index = best;
    peak.by_category = phase.window.at_peak_total[p];
    peaks.push_back(std::move(peak));
  }
  return peaks;
}

std::string MemoryProfiler::ChromeTraceJson() const {
  const int pid = static_cast<int>(::getpid());
  constexpr int kCounterTid = 0, kPhaseTid = 1;
  const std::array<bool, kNumPlaces> used = PlacesUsed(phases_);
  std::vector<nlohmann::json> events;
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"ts", 0},
                    {"pid", pid},
                    {"tid", kCounterTid},
                    {"args", {{"name", "hoist memory"}}}});
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"ts", 0},
                    {"pid", pid},
                    {"tid", kPhaseTid},
                    {"args", {{"name", "phases"}}}});
  const auto counters = [&](int64_t ts, const MemorySnapshot::Table& table) {
    for (int p = 0; p < kNumPlaces; ++p) {
      if (!used[p]) continue;
      events.push_back({{"name", std::string(PlaceName(Place(p))) + " memory"},
                        {"ph", "C"},
                        {"ts", ts},
                        {"pid", pid},
                        {"tid", kCounterTid},
                        {"args", CategoriesJson(table[p])}});
    }
  };
  for (size_t i = 0; i < phases_.size(); ++i) {
    const MemoryPhase& phase = phases_[i];
    nlohmann::json args = nlohmann::json::object();
    for (int p = 0; p < kNumPlaces; ++p) {
      if (!used[p]) continue;
      args["peak"][PlaceName(Place(p))] = FormatBytes(phase.window.peak_total[p]);
      args["peak_bytes"][PlaceName(Place(p))] = phase.window.peak_total[p];
      args["end_bytes"][PlaceName(Place(p))] = RowTotal(phase.end[p]);
    }
    if (phase.kind) {
      args["kind"] = PhaseName(*phase.kind);
      args["step"] = phase.step;
      if (phase.block >= 0) args["block"] = phase.block;
    }
    events.push_back({{"name", phase.name},
                      {"cat", "phase"},
                      {"ph", "X"},
                      {"ts", phase.start_us},
                      {"dur", phase.end_us - phase.start_us},
                      {"pid", pid},
                      {"tid", kPhaseTid},
                      {"args", std::move(args)}});
    if (i == 0) counters(phase.start_us, phase.start);
    counters(phase.start_us + (phase.end_us - phase.start_us) / 2, phase.window.at_peak_total);
    counters(phase.end_us, phase.end);
  }

  nlohmann::json peaks = nlohmann::json::array();
  for (const PeakAttribution& peak : Peaks()) {
    peaks.push_back({{"place", PlaceName(peak.place)},
                     {"bytes", peak.bytes},
                     {"phase", peak.phase},
                     {"by_category", CategoriesJson(peak.by_category)},
                     {"sentence", PeakSentence(peak)}});
  }
  const nlohmann::json other = {
      {"producer", "hoist memory profiler"},
      {"unit", "bytes"},
      {"counters",
       "bytes by category per place at each phase boundary; the value at a phase's midpoint is "
       "the split at that phase's largest total, whose instant within the phase is not recorded"},
      {"peaks", std::move(peaks)}};

  // One event a line, so that the file also reads and greps as text. Phase names are the
  // caller's: malformed UTF-8 in them is replaced rather than thrown on.
  const auto dump = [](const nlohmann::json& value) {
    return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::string text = "{\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    text += dump(events[i]);
    text += i + 1 < events.size() ? ",\n" : "\n";
  }
  text += "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + dump(other) + "}\n";
  return text;
}

std::string MemoryProfiler::Svg() const {
  constexpr double kWidth = 1100, kLeft = 100, kRight = 180, kPlotHeight = 240;
  constexpr double kPlotWidth = kWidth - kLeft - kRight;
  constexpr double kHeaderHeight = 40, kPanelTop = 58, kPanelHeight = kPanelTop + kPlotHeight + 62;

  const std::array<bool, kNumPlaces> used = PlacesUsed(phases_);
  std::vector<int> places = {int(Place::kDevice)};
  for (int p = 1; p < kNumPlaces; ++p) {
    if (used[p]) places.push_back(p);
  }
  const std::vector<PeakAttribution> peaks = Peaks();
  const int n = static_cast<int>(phases_.size());
  const double height = kHeaderHeight + kPanelHeight * static_cast<double>(places.size());

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  Appendf(svg,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n",
          kWidth, height, kWidth, height);
  svg += "<title>hoist memory profile</title>\n";
  Appendf(svg, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", kWidth, height);
  std::string heading = "hoist memory profile: no phases recorded";
  if (n > 0) {
    heading = "hoist memory profile: " + std::to_string(n) + " phases over " +
              FormatMicros(phases_.back().end_us - phases_.front().start_us);
  }
  Appendf(svg, "<text x=\"%.0f\" y=\"26\" font-size=\"16\" font-weight=\"bold\">%s</text>\n", kLeft,
          XmlEscape(heading).c_str());

  for (size_t panel = 0; panel < places.size(); ++panel) {
    const int p = places[panel];
    const double top = kHeaderHeight + kPanelHeight * static_cast<double>(panel);
    const double plot_top = top + kPanelTop, plot_bottom = plot_top + kPlotHeight;
    const PeakAttribution* peak = nullptr;
    for (const PeakAttribution& candidate : peaks) {
      if (int(candidate.place) == p) peak = &candidate;
    }
    Appendf(svg, "<g id=\"place-%s\">\n", PlaceName(Place(p)));
    Appendf(svg, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
            kLeft, top + 22, PlaceName(Place(p)));
    const std::string caption =
        peak ? PeakSentence(*peak) : std::string(PlaceName(Place(p))) + ": no bytes tracked";
    Appendf(svg, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\">", kLeft, top + 42);
    svg += XmlEscape(caption) + "</text>\n";

    // Samples: each phase's start, its largest moment (at the middle of its column) and its end.
    struct Sample {
      double x;
      const std::array<int64_t, kNumCategories>* row;
    };
    std::vector<Sample> samples;
    const double column = n > 0 ? kPlotWidth / n : kPlotWidth;
    for (int i = 0; i < n; ++i) {
      const MemoryPhase& phase = phases_[i];
      samples.push_back({kLeft + column * i, &phase.start[p]});
      samples.push_back({kLeft + column * (i + 0.5), &phase.window.at_peak_total[p]});
      samples.push_back({kLeft + column * (i + 1), &phase.end[p]});
    }
    int64_t largest = 0;
    for (const Sample& sample : samples) largest = std::max(largest, RowTotal(*sample.row));
    // Three to six steps; an empty panel still gets a readable axis (0 B to 1 KiB).
    const int64_t step_bytes = largest > 0 ? AxisStepBytes((largest + 4) / 5) : 1024;
    const int64_t y_max = step_bytes * (largest / step_bytes + 1);
    const auto y_of = [&](int64_t bytes) {
      return plot_bottom - kPlotHeight * static_cast<double>(bytes) / static_cast<double>(y_max);
    };

    // Grid and y axis labels.
    for (int64_t bytes = 0; bytes <= y_max; bytes += step_bytes) {
      Appendf(svg,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>"
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
              kLeft, y_of(bytes), kLeft + kPlotWidth, y_of(bytes), kLeft - 6, y_of(bytes) + 4,
              AxisBytes(bytes).c_str());
    }
    Appendf(svg,
            "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\">"
            "bytes</text>\n",
            kLeft - 78, plot_top + kPlotHeight / 2);

    // Stacked areas, param at the bottom.
    std::vector<int64_t> below(samples.size(), 0);
    for (int c = 0; c < kNumCategories; ++c) {
      bool any = false;
      for (const Sample& sample : samples) any = any || (*sample.row)[c] > 0;
      if (!any) continue;
      std::string points;
      for (size_t j = 0; j < samples.size(); ++j) {
        Appendf(points, "%.1f,%.1f ", samples[j].x, y_of(below[j] + (*samples[j].row)[c]));
      }
      for (size_t j = samples.size(); j-- > 0;) {
        Appendf(points, "%.1f,%.1f ", samples[j].x, y_of(below[j]));
        below[j] += (*samples[j].row)[c];
      }
      points.pop_back();
      Appendf(svg, "<polygon fill=\"%s\" fill-opacity=\"0.85\" stroke=\"%s\" points=\"",
              kCategoryColors[c], kCategoryColors[c]);
      svg += points + "\"><title>" + CategoryName(Category(c)) + "</title></polygon>\n";
    }

    // Step boundaries, where the phases were named by step.
    std::vector<int> step_starts;
    for (int i = 1; i < n; ++i) {
      if (phases_[i].kind && phases_[i].step != phases_[i - 1].step) step_starts.push_back(i);
    }
    for (int i : step_starts) {
      Appendf(svg,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888888\" "
              "stroke-dasharray=\"2 3\"/>\n",
              kLeft + column * i, plot_top, kLeft + column * i, plot_bottom);
      if (step_starts.size() <= 24) {
        Appendf(svg, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555555\">step %lld</text>\n",
                kLeft + column * i + 3, plot_top - 4, static_cast<long long>(phases_[i].step));
      }
    }

    // A hover title per phase column: its name, its totals and its peak.
    for (int i = 0; i < n; ++i) {
      const MemoryPhase& phase = phases_[i];
      const std::string tip = phase.name + ": " + FormatBytes(RowTotal(phase.start[p])) + " to " +
                              FormatBytes(RowTotal(phase.end[p])) + ", peak " +
                              FormatBytes(phase.window.peak_total[p]) + ", " +
                              FormatMicros(phase.end_us - phase.start_us);
      Appendf(svg,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"#000000\" "
              "fill-opacity=\"0\"><title>",
              kLeft + column * i, plot_top, column, kPlotHeight);
      svg += XmlEscape(tip) + "</title></rect>\n";
    }

    // Axes, x ticks (phase boundary index over its time) and the x axis title.
    Appendf(svg, "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"#000000\"/>\n", kLeft,
            plot_top, plot_bottom, kLeft + kPlotWidth);
    const int tick_every = NiceCount(n / 10.0);
    for (int k = 0; n > 0 && k <= n; k += tick_every) {
      const double x = kLeft + column * k;
      const int64_t at_us = k == 0 ? phases_[0].start_us : phases_[k - 1].end_us;
      Appendf(svg,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\"/>"
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>"
              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555555\">%s</text>\n",
              x, plot_bottom, x, plot_bottom + 4, x, plot_bottom + 16, k, x, plot_bottom + 29,
              FormatMicros(at_us).c_str());
    }
    Appendf(svg,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">phase boundary (above) and time "
            "since the profiler started (below); each phase is one column</text>\n",
            kLeft + kPlotWidth / 2, plot_bottom + 48);

    // The peak: a dashed line at its height and a ring at its phase.
    if (peak) {
      const double x = kLeft + column * (peak->phase_index + 0.5), y = y_of(peak->bytes);
      Appendf(svg,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\" "
              "stroke-dasharray=\"6 4\"/>\n"
              "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"none\" stroke=\"#000000\" "
              "stroke-width=\"2\"/>\n",
              kLeft, y, kLeft + kPlotWidth, y, x, y);
      const bool right_half = x > kLeft + kPlotWidth / 2;
      Appendf(svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-weight=\"bold\">",
              right_half ? x - 8 : x + 8, y - 6, right_half ? "end" : "start");
      svg += "peak " + FormatBytes(peak->bytes) + "</text>\n";
    }

    // Legend: every category in its fixed color, then the peak line.
    const double legend_x = kLeft + kPlotWidth + 20;
    for (int c = 0; c < kNumCategories; ++c) {
      const double y = plot_top + 18.0 * c;
      Appendf(svg,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
              "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
              legend_x, y, kCategoryColors[c], legend_x + 18, y + 10, CategoryName(Category(c)));
    }
    const double peak_legend_y = plot_top + 18.0 * kNumCategories + 6;
    Appendf(svg,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\" "
            "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%.1f\">peak</text>\n",
            legend_x, peak_legend_y, legend_x + 12, peak_legend_y, legend_x + 18,
            peak_legend_y + 4);
    svg += "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

Status MemoryProfiler::WriteChromeTrace(const std::string& path, FileSystem& fs) const {
  const std::string text = ChromeTraceJson();
  const std::string_view pieces[] = {text};
  return WriteFileAtomically(fs, path, pieces).WithContext("writing memory trace '" + path + "'");
}

Status MemoryProfiler::WriteSvg(const std::string& path, FileSystem& fs) const {
  const std::string text = Svg();
  const std::string_view pieces[] = {text};
  return WriteFileAtomically(fs, path, pieces)
      .WithContext("writing memory profile SVG '" + path + "'");
}

}  // namespace hoist::runtime
