#include "ted/train/trainer.hpp"

#include <chrono>

#include "ted/model/gpt.hpp"
#include "ted/train/loss_scaler.hpp"
#include "ted/train/megatron_data.hpp"

namespace ted::train {

namespace {
MegatronSpec megatron_spec(const TrainConfig& config) {
  MegatronSpec spec;
  spec.path = config.data.path;
  spec.valid_path = config.data.valid_path;
  spec.valid_fraction = config.data.valid_fraction;
  spec.vocab = config.model.vocab;
  spec.seq_len = config.model.seq_len;
  spec.seed = config.model.seed;
  return spec;
}
}  // namespace

std::unique_ptr<TokenSource> make_source(const TrainConfig& config) {
  if (config.data.source == "file")
    return std::make_unique<TokenFileSource>(config.data.path, config.data.token_bytes,
                                             config.model.vocab, config.model.seq_len);
  if (config.data.source == "megatron")
    return make_megatron_source(megatron_spec(config), MegatronSplit::training);
  return std::make_unique<SyntheticSource>(config.model.vocab, config.model.seed,
                                           config.data.noise);
}

namespace {

// Another source's samples from index `offset` on.
class OffsetSource final : public TokenSource {
 public:
  OffsetSource(std::unique_ptr<TokenSource> inner, std::int64_t offset)
      : inner_(std::move(inner)), offset_(offset) {}
  void sample(std::int64_t index, int seq_len, std::int32_t* tokens,
              std::int32_t* targets) const override {
    inner_->sample(offset_ + index, seq_len, tokens, targets);
  }
  std::string describe() const override {
    return inner_->describe() + " from sample " + std::to_string(offset_);
  }

 private:
  std::unique_ptr<TokenSource> inner_;
  std::int64_t offset_;
};

}  // namespace

std::unique_ptr<TokenSource> make_validation_source(const TrainConfig& config) {
  if (config.data.source == "synthetic")
    return std::make_unique<OffsetSource>(make_source(config), std::int64_t{1} << 40);
  if (config.data.source == "megatron")
    return make_megatron_source(megatron_spec(config), MegatronSplit::validation);
  return nullptr;
}

namespace {

// The ranks that hold the same experts and reduce their gradients: the expert-data group, or
// with experts whole on every tensor rank the T x D ranks of the same e.
Communicator& expert_group(const ParallelConfig& p, TedGroups& groups) {
  return p.split_experts ? groups.expert_data() : groups.expert_replicas();
}

model::ModelParallel model_parallel(const ParallelConfig& p, TedGroups* groups) {
  model::ModelParallel m;
  m.exchange.switches = p.exchange();
  m.cac = p.cac;
  m.cac_all_reduce = p.cac_all_reduce;
  if (groups) {
    m.exchange.tensor = &groups->tensor();
    m.exchange.expert = &groups->expert();
    m.exchange.expert_control = &groups->control(GroupKind::expert);
    m.dense_pad = static_cast<std::size_t>(groups->nonexpert_data().size());
    m.expert_pad = static_cast<std::size_t>(expert_group(p, *groups).size());
  }
  return m;
}

OptimizerParallel optimizer_parallel(const ParallelConfig& p, TedGroups* groups) {
  OptimizerParallel o;
  o.zero1 = p.zero1;
  o.tile_elems = static_cast<std::size_t>(p.tile_elems);
  if (groups) {
    o.dense_group = &groups->nonexpert_data();
    o.expert_group = &expert_group(p, *groups);
    o.control = &groups->control();
    o.tensor_rank0 = groups->tensor().rank() == 0;
    o.expert_group_spans_tensor = !p.split_experts && groups->tensor().size() > 1;
  }
  return o;
}

}  // namespace

struct Trainer::Core {
  explicit Core(const TrainConfig& config)
      : source(make_source(config)), validation(make_validation_source(config)) {}
  virtual ~Core() = default;
  virtual StepRecord step(int step) = 0;
  virtual TrainState state() = 0;
  virtual void restore(const TrainState& state) = 0;
  virtual double evaluate(int step, int batches) = 0;
  virtual double fingerprint() = 0;
  virtual const model::ParamLayout& params() const = 0;
  virtual const std::string& attention() const = 0;
  virtual std::size_t activations_saved_peak() const = 0;
  std::unique_ptr<TokenSource> source;
  std::unique_ptr<TokenSource> validation;  // null: no held-out split
  std::function<void(int, void*, DataType)> before_update;
  std::function<void(const std::vector<GradientShard>&)> probe;
};

namespace {

template <typename T>
class TypedCore final : public Trainer::Core {
 public:
  using M = master_t<T>;
  TypedCore(const TrainConfig& config, Device& device, TedGroups* groups)
      : Core(config),
        config_(config),
        groups_(groups),
        model_(config_.model, device, model_parallel(config_.parallel, groups)),
        optimizer_(model_.params(), config_.optimizer, model_.ops(),
                   optimizer_parallel(config_.parallel, groups)),
        scaling_(std::is_same_v<T, Half>),
        scaler_({config_.run.loss_scale, 2.0, 0.5, config_.run.loss_scale_window, 1.0}) {
    if (groups_) {
      dp_size_ = groups_->nonexpert_data().size();
      dp_rank_ = groups_->nonexpert_data().rank();
    }
    std::size_t tokens = static_cast<std::size_t>(config_.data.micro_batch) * config_.model.seq_len;
    tokens_.resize(tokens);
    targets_.resize(tokens);
  }

  StepRecord step(int step) override {
    auto start = std::chrono::steady_clock::now();
    const int B = config_.data.micro_batch, Mb = config_.data.micro_batches;
    const int S = config_.model.seq_len;
    StepRecord record;
    record.step = step;
    record.loss_scale = scaling_ ? scaler_.scale() : 1.0;
    model_.params().zero_grads();
    const int global_micro = Mb * dp_size_;
    for (int m = 0; m < Mb; ++m) {
      const std::int64_t first = first_sample(step, Mb, dp_size_, m, dp_rank_, B);
      for (int s = 0; s < B; ++s)
        source->sample(first + s, S, tokens_.data() + static_cast<std::size_t>(s) * S,
                       targets_.data() + static_cast<std::size_t>(s) * S);
      model::Batch batch{tokens_.data(), targets_.data(), B, first, step, B};
      auto losses = model_.forward(batch);
      double forward_flops = model_.last_forward_flops();
      model_.backward(static_cast<M>(record.loss_scale) / static_cast<M>(global_micro));
      record.flops += forward_flops * (config_.model.checkpoint ? 4.0 : 3.0);
      record.lm_loss += losses.lm;
      record.aux_loss += losses.aux;
      record.dropped += losses.dropped;
      record.expert_load.resize(losses.expert_load.size());
      for (std::size_t l = 0; l < losses.expert_load.size(); ++l) {
        auto& into = record.expert_load[l];
        into.resize(losses.expert_load[l].size());
        for (std::size_t e = 0; e < into.size(); ++e) into[e] += losses.expert_load[l][e];
      }
    }
    if (groups_) {  // mean over the global batch: sum over the data-parallel ranks
      double sums[3] = {record.lm_loss, record.aux_loss, static_cast<double>(record.dropped)};
      groups_->control(GroupKind::nonexpert_data).all_reduce(sums, sums, 3, DataType::f64);
      record.lm_loss = sums[0], record.aux_loss = sums[1];
      record.dropped = static_cast<int>(sums[2]);
      std::vector<double> load;  // exact in doubles up to 2^53 choices
      for (const auto& layer : record.expert_load)
        load.insert(load.end(), layer.begin(), layer.end());
      auto& control = groups_->control(GroupKind::nonexpert_data);
      if (!load.empty()) control.all_reduce(load.data(), load.data(), load.size(), DataType::f64);
      std::size_t at = 0;
      for (auto& layer : record.expert_load)
        for (auto& count : layer) count = static_cast<std::int64_t>(load[at++]);
    }
    record.lm_loss /= global_micro;
    record.aux_loss /= global_micro;
    record.loss = record.lm_loss + config_.model.gate.aux_coeff * record.aux_loss;
    if (before_update)
      before_update(step, model_.params().gradient_data(), model_.params().gradient_type());
    optimizer_.set_gradient_probe(probe);
    const OptimizerStep result = optimizer_.step(step, config_.steps, record.loss_scale, scaling_);
    if (scaling_) scaler_.update(!result.applied);
    record.grad_norm = result.grad_norm;
    record.skipped = !result.applied;
    record.lr = optimizer_.last_lr();
    model_.ops().device().synchronize();  // the update is queued on the device: time all of it
    record.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    record.tokens_per_second = static_cast<double>(B) * global_micro * S / record.seconds;
    return record;
  }

  TrainState state() override {
    TrainState state;
    auto& values = model_.params().values();
    state.push_back(device_blob(model_.ops().device(), "params.values", values.data(),
                                values.size() * sizeof(T)));
    optimizer_.save(state);
    state.push_back(value_blob("loss_scaler", scaler_.state()));
    return state;
  }

  void restore(const TrainState& state) override {
    auto& values = model_.params().values();
    restore_device(model_.ops().device(), state, "params.values", values.data(),
                   values.size() * sizeof(T));
    optimizer_.load(state);
    LossScaler::State scaler{};
    restore_value(state, "loss_scaler", scaler);
    scaler_.restore(scaler);
  }

  double evaluate(int step, int batches) override {
    if (!validation) throw ConfigError("the data has no held-out split to evaluate on");
    const int B = config_.data.micro_batch, Mb = config_.data.micro_batches;
    const int S = config_.model.seq_len;
    model_.set_training(false);
    double sum = 0;
    for (int b = 0; b < batches; ++b)
      for (int m = 0; m < Mb; ++m) {
        const std::int64_t first = first_sample(b, Mb, dp_size_, m, dp_rank_, B);
        for (int s = 0; s < B; ++s)
          validation->sample(first + s, S, tokens_.data() + static_cast<std::size_t>(s) * S,
                             targets_.data() + static_cast<std::size_t>(s) * S);
        sum += model_.forward({tokens_.data(), targets_.data(), B, first, step, B}).lm;
      }
    model_.set_training(true);
    if (groups_)
      groups_->control(GroupKind::nonexpert_data).all_reduce(&sum, &sum, 1, DataType::f64);
    return sum / (static_cast<double>(batches) * Mb * dp_size_);
  }

  double fingerprint() override {
    const auto& params = model_.params();
    bool tensor_first = !groups_ || groups_->tensor().rank() == 0;
    bool dense_first = !groups_ || groups_->nonexpert_data().rank() == 0;
    bool expert_first = !groups_ || groups_->expert_data().rank() == 0;
    std::vector<IndexRange> owned;
    for (const auto& spec : params.specs()) {
      bool owner = spec.kind == model::ParamKind::dense ? dense_first : expert_first;
      if (!owner || (spec.tensor_replicated && !tensor_first)) continue;
      owned.push_back({spec.offset, spec.offset + spec.size()});
    }
    double sum = model_.ops().sum_squares(params.values().data(), dtype_of<T>::value, owned, 0.0);
    if (groups_) groups_->control().all_reduce(&sum, &sum, 1, DataType::f64);
    return sum;
  }

  const model::ParamLayout& params() const override { return model_.params().layout(); }
  const std::string& attention() const override { return model_.attention(); }
  std::size_t activations_saved_peak() const override { return model_.saved_peak_bytes(); }

 private:
  TrainConfig config_;
  TedGroups* groups_;
  int dp_size_ = 1, dp_rank_ = 0;
  model::GptModel<T> model_;
  AdamW<T> optimizer_;
  bool scaling_;
  LossScaler scaler_;
  std::vector<std::int32_t> tokens_, targets_;
};

const TrainConfig& validated(const TrainConfig& config) {
  config.validate();
  return config;
}

std::unique_ptr<Trainer::Core> make_core(const TrainConfig& config, Device& device,
                                         TedGroups* groups) {
  switch (validated(config).run.dtype) {
    case DataType::bf16:
      return std::make_unique<TypedCore<BFloat16>>(config, device, groups);
    case DataType::f16:
      return std::make_unique<TypedCore<Half>>(config, device, groups);
    default:
      return std::make_unique<TypedCore<float>>(config, device, groups);
  }
}

}  // namespace

Trainer::Trainer(const TrainConfig& config, Device& device, TedGroups* groups)
    : core_(make_core(config, device, groups)) {}

Trainer::~Trainer() = default;

StepRecord Trainer::step(int step) {
  return core_->step(step);
}
double Trainer::fingerprint() {
  return core_->fingerprint();
}
const model::ParamLayout& Trainer::params() const {
  return core_->params();
}
const std::string& Trainer::attention() const {
  return core_->attention();
}
std::size_t Trainer::activations_saved_peak() const {
  return core_->activations_saved_peak();
}
const TokenSource& Trainer::source() const {
  return *core_->source;
}
TrainState Trainer::state() {
  return core_->state();
}
void Trainer::restore(const TrainState& state) {
  core_->restore(state);
}
bool Trainer::has_validation() const {
  return core_->validation != nullptr;
}
double Trainer::evaluate(int step, int batches) {
  return core_->evaluate(step, batches);
}
void Trainer::set_gradient_probe(std::function<void(const std::vector<GradientShard>&)> probe) {
  core_->probe = std::move(probe);
}
void Trainer::set_before_update(std::function<void(int, void*, DataType)> hook) {
  core_->before_update = std::move(hook);
}

}  // namespace ted::train
