#include "runtime/model/model_family.h"

#include "core/check.h"

namespace hoist::runtime {

const ModelFamilySpec& FamilyOf(ModelFamily family) {
  // Every family hoist trains; adding one adds its spec here and nowhere else outside its file.
  static const ModelFamilySpec* const kFamilies[] = {&Gpt2Family(),    &LlamaFamily(),
                                                     &Qwen2Family(),   &Qwen3Family(),
                                                     &MistralFamily(), &Gemma2Family()};
  for (const ModelFamilySpec* spec : kFamilies) {
    if (spec->family == family) return *spec;
  }
  HOIST_CHECK(false) << "no spec for model family " << static_cast<int>(family);
  return Gpt2Family();
}

}  // namespace hoist::runtime
