// The printer: custom assembly forms, values named after their source names made unique.
#include "ir/Printer.h"
#include "ir/Ops.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <unordered_map>

namespace frank {
namespace {

std::string formatFloat(double v, ElemKind kind) {
  // Non-finite values print as bit patterns, the only MLIR spelling for them.
  if (!std::isfinite(v)) {
    if (kind == ElemKind::F64) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      return fmt::format("0x{:016X}", bits);
    }
    float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (kind == ElemKind::F32)
      return fmt::format("0x{:08X}", bits);
    uint32_t sign = bits >> 31;
    uint32_t half = kind == ElemKind::BF16 ? (bits >> 16)
                                           : ((sign << 15) | 0x7c00 | (std::isnan(f) ? 0x200 : 0));
    return fmt::format("0x{:04X}", half);
  }
  std::string s =
      kind == ElemKind::F64 ? fmt::format("{}", v) : fmt::format("{}", static_cast<float>(v));
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  else if (s.find('.') == std::string::npos) {
    size_t e = s.find('e');
    s.insert(e, ".0");
  }
  return s;
}

// `@name`, quoted where the name is not an identifier (it was written `@"..."`), so that the
// print parses back.
static std::string symbolRef(const std::string &name) {
  auto idChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
  };
  const bool plain =
      !name.empty() &&
      (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_' || name[0] == '$') &&
      std::all_of(name.begin(), name.end(), idChar);
  return plain ? "@" + name : fmt::format("@\"{}\"", name);
}

class Printer {
public:
  std::string out;

  void printFunction(const FuncOp &fn, int indent) {
    names_.clear();
    used_.clear();
    line(indent,
         fmt::format("util.func {}{}(", fn.isPublic ? "public " : "private ", symbolRef(fn.name)));
    if (fn.body) {
      for (size_t i = 0; i < fn.body->arguments.size(); ++i) {
        const Value *arg = fn.body->arguments[i].get();
        out += fmt::format("{}%{}: {}", i ? ", " : "", nameOf(arg), arg->type.str());
      }
    } else {
      for (size_t i = 0; i < fn.argTypes.size(); ++i)
        out += fmt::format("{}{}", i ? ", " : "", fn.argTypes[i].str());
    }
    out += ")";
    if (!fn.resultTypes.empty())
      out += " -> " + typeList(fn.resultTypes, true);
    if (!fn.body) {
      out += "\n";
      return;
    }
    out += " {\n";
    for (auto &op : fn.body->ops)
      printOp(*op, indent + 2);
    line(indent, "}\n");
  }

private:
  std::unordered_map<const Value *, std::string> names_;
  std::set<std::string> used_;

  void line(int indent, const std::string &text) { out += std::string(indent, ' ') + text; }

  std::string nameOf(const Value *v) {
    auto it = names_.find(v);
    if (it != names_.end())
      return it->second;
    std::string base = v->name.empty() ? std::string("v") : v->name;
    std::string name = base;
    for (int i = 1; used_.count(name); ++i)
      name = fmt::format("{}_{}", base, i);
    used_.insert(name);
    names_[v] = name;
    return name;
  }
  std::string ref(const Value *v) { return fmt::format("%{}", nameOf(v)); }

  static std::string typeList(const std::vector<Type> &types, bool parens) {
    if (types.size() == 1 && !parens)
      return types[0].str();
    if (types.size() == 1)
      return types[0].str();
    std::string s = "(";
    for (size_t i = 0; i < types.size(); ++i)
      s += (i ? ", " : "") + types[i].str();
    return s + ")";
  }

  std::string operandsAndTypes(const std::vector<Value *> &values, size_t begin, size_t end) {
    std::string refs, types;
    for (size_t i = begin; i < end; ++i) {
      refs += fmt::format("{}{}", i > begin ? ", " : "", ref(values[i]));
      types += fmt::format("{}{}", i > begin ? ", " : "", values[i]->type.str());
    }
    return refs + " : " + types;
  }

  static std::string intList(const AttrList &list) {
    std::string out = "[";
    for (size_t i = 0; i < list.size(); ++i)
      out += fmt::format("{}{}", i ? ", " : "", list[i].integer());
    return out + "]";
  }

  // `indexing_maps = [...]`, an op's maps.
  static std::string indexingMaps(const Op &op) {
    std::vector<std::string> maps;
    for (const Attribute &map : op.attr("indexing_maps").list())
      maps.push_back(map.map().str());
    return fmt::format("indexing_maps = [{}]", fmt::join(maps, ", "));
  }

  // `frank.config = "..."`, the lowering choices set on the op.
  static std::string configEntry(const Op &op) {
    return fmt::format("{} = \"{}\"", kConfigAttr, op.attr(kConfigAttr).string());
  }

  // Mixed static/dynamic list: SSA operands, taken in order from `next`, fill the kDynamic slots.
  std::string mixedList(const Op &op, const char *attr, size_t &next) {
    std::string out = "[";
    const AttrList &list = op.attr(attr).list();
    for (size_t i = 0; i < list.size(); ++i) {
      out += i ? ", " : "";
      out += list[i].integer() == kDynamic ? ref(op.operands[next++])
                                           : std::to_string(list[i].integer());
    }
    return out + "]";
  }

  std::string insOuts(const Op &op) {
    size_t numInputs = static_cast<size_t>(op.attr("num_inputs").integer());
    std::string out;
    if (numInputs > 0)
      out += fmt::format(" ins({})", operandsAndTypes(op.operands, 0, numInputs));
    return out +
           fmt::format(" outs({})", operandsAndTypes(op.operands, numInputs, op.operands.size()));
  }

  std::string resultTypes(const Op &op) {
    std::string out;
    for (size_t i = 0; i < op.results.size(); ++i)
      out += (i ? ", " : "") + op.results[i]->type.str();
    return out;
  }

  static std::string denseLiteral(const DenseAttr &dense, const Type &type) {
    auto one = [&](const Literal &l) {
      if (l.kind == Literal::Kind::Bool)
        return std::string(l.i ? "true" : "false");
      if (l.kind == Literal::Kind::Float)
        return formatFloat(l.f, type.elem);
      return std::to_string(l.i);
    };
    if (dense.values.size() == 1)
      return one(dense.values[0]);
    std::string out;
    size_t next = 0;
    std::function<void(size_t)> rec = [&](size_t dim) {
      if (dim == type.shape.size()) {
        out += one(dense.values[next++]);
        return;
      }
      out += "[";
      for (int64_t i = 0; i < type.shape[dim]; ++i) {
        if (i)
          out += ", ";
        rec(dim + 1);
      }
      out += "]";
    };
    rec(0);
    return out;
  }

  void printRegion(const Block &block, int indent, bool header) {
    out += "{\n";
    if (header) {
      line(indent, "^bb0(");
      for (size_t i = 0; i < block.arguments.size(); ++i)
        out += fmt::format("{}%{}: {}", i ? ", " : "", nameOf(block.arguments[i].get()),
                           block.arguments[i]->type.str());
      out += "):\n";
    }
    for (auto &op : block.ops)
      printOp(*op, indent + 2);
    line(indent, "}");
  }

  void printOp(const Op &op, int indent) {
    std::string text;
    if (!op.results.empty()) {
      for (size_t i = 0; i < op.results.size(); ++i)
        text += (i ? ", " : "") + ref(op.result(static_cast<int>(i)));
      text += " = ";
    }
    text += op.name();
    line(indent, text);
    printOpBody(op, indent);
    out += "\n";
  }

  void printOpBody(const Op &op, int indent) {
    // Ops without results (terminators, result-less calls) never read this.
    static const Type none;
    const Type &resultType = op.results.empty() ? none : op.result()->type;
    OpKind kind = op.kind;
    if (kind == OpKind::ArithConstant &&
        std::holds_alternative<DenseAttr>(op.attr("value").value)) {
      out += fmt::format(" dense<{}> : {}",
                         denseLiteral(std::get<DenseAttr>(op.attr("value").value), resultType),
                         resultType.str());
      return;
    }
    if (kind == OpKind::ArithConstant) {
      const Literal &lit = constantValue(op);
      if (lit.kind == Literal::Kind::Bool)
        out += lit.i ? " true" : " false";
      else if (lit.kind == Literal::Kind::Float)
        out += fmt::format(" {} : {}", formatFloat(lit.f, resultType.elem), resultType.str());
      else
        out += fmt::format(" {} : {}", lit.i, resultType.str());
      return;
    }
    if (isArithBinary(kind)) {
      out +=
          fmt::format(" {}, {} : {}", ref(op.operands[0]), ref(op.operands[1]), resultType.str());
      return;
    }
    if (isMathUnary(kind)) {
      out += fmt::format(" {} : {}", ref(op.operands[0]), resultType.str());
      return;
    }
    if (kind == OpKind::CmpF || kind == OpKind::CmpI) {
      out += fmt::format(" {}, {}, {} : {}", predicate(op), ref(op.operands[0]),
                         ref(op.operands[1]), op.operands[0]->type.str());
      return;
    }
    if (kind == OpKind::Select) {
      out += fmt::format(" {}, {}, {} : {}", ref(op.operands[0]), ref(op.operands[1]),
                         ref(op.operands[2]), resultType.str());
      return;
    }
    if (isCast(kind)) {
      out += fmt::format(" {} : {} to {}", ref(op.operands[0]), op.operands[0]->type.str(),
                         resultType.str());
      return;
    }
    switch (kind) {
    case OpKind::TensorDim:
      out += fmt::format(" {}, {} : {}", ref(op.operands[0]), ref(op.operands[1]),
                         op.operands[0]->type.str());
      return;
    case OpKind::TensorEmpty: {
      out += "(";
      for (size_t i = 0; i < op.operands.size(); ++i)
        out += (i ? ", " : "") + ref(op.operands[i]);
      out += ") : " + resultType.str();
      return;
    }
    case OpKind::LinalgFill:
      out += fmt::format(" ins({}) outs({}) -> {}", operandsAndTypes(op.operands, 0, 1),
                         operandsAndTypes(op.operands, 1, 2), resultType.str());
      return;
    case OpKind::LinalgGeneric: {
      GenericView g{const_cast<Op &>(op)};
      out += " {" + indexingMaps(op) + ", iterator_types = [";
      const AttrList &iters = op.attr("iterator_types").list();
      for (size_t i = 0; i < iters.size(); ++i)
        out += fmt::format("{}\"{}\"", i ? ", " : "", iters[i].string());
      out += "]";
      if (op.hasAttr(kConfigAttr))
        out += ", " + configEntry(op);
      if (op.hasAttr(kVisibleKeysAttr))
        out +=
            fmt::format(", {} = {}", kVisibleKeysAttr, intList(op.attr(kVisibleKeysAttr).list()));
      out += "}";
      size_t numInputs = g.numInputs();
      if (numInputs > 0)
        out += fmt::format(" ins({})", operandsAndTypes(op.operands, 0, numInputs));
      out += fmt::format(" outs({}) ", operandsAndTypes(op.operands, numInputs, numInputs + 1));
      printRegion(*op.regions[0], indent, true);
      out += " -> " + resultType.str();
      return;
    }
    case OpKind::LinalgIndex: out += fmt::format(" {} : index", indexDim(op)); return;
    case OpKind::LinalgYield:
    case OpKind::FlowReturn:
    case OpKind::Return:
      if (!op.operands.empty())
        out += " " + operandsAndTypes(op.operands, 0, op.operands.size());
      return;
    case OpKind::Call: {
      out += fmt::format(" {}(", symbolRef(callee(op)));
      std::vector<Type> argTypes;
      for (size_t i = 0; i < op.operands.size(); ++i) {
        out += (i ? ", " : "") + ref(op.operands[i]);
        argTypes.push_back(op.operands[i]->type);
      }
      std::vector<Type> resultTypes;
      for (auto &r : op.results)
        resultTypes.push_back(r->type);
      std::string args = "(";
      for (size_t i = 0; i < argTypes.size(); ++i)
        args += (i ? ", " : "") + argTypes[i].str();
      out += fmt::format(") : {}) -> {}", args, typeList(resultTypes, true));
      return;
    }

    case OpKind::TensorExpandShape:
    case OpKind::TensorCollapseShape: {
      out += " " + ref(op.operands[0]) + " [";
      const AttrList &groups = op.attr("reassociation").list();
      for (size_t g = 0; g < groups.size(); ++g)
        out += (g ? ", " : "") + intList(groups[g].list());
      out += "]";
      if (kind == OpKind::TensorExpandShape) {
        size_t next = 1;
        out += " output_shape " + mixedList(op, "static_output_shape", next);
      }
      out += fmt::format(" : {} into {}", op.operands[0]->type.str(), resultType.str());
      return;
    }
    case OpKind::TensorExtract: {
      out += " " + ref(op.operands[0]) + "[";
      for (size_t i = 1; i < op.operands.size(); ++i)
        out += (i > 1 ? ", " : "") + ref(op.operands[i]);
      out += "] : " + op.operands[0]->type.str();
      return;
    }
    case OpKind::TensorExtractSlice:
    case OpKind::TensorInsertSlice: {
      bool insert = kind == OpKind::TensorInsertSlice;
      size_t next = insert ? 2 : 1;
      out += " " + ref(op.operands[0]);
      if (insert)
        out += " into " + ref(op.operands[1]);
      out += mixedList(op, "static_offsets", next);
      out += " " + mixedList(op, "static_sizes", next);
      out += " " + intList(op.attr("static_strides").list());
      out += fmt::format(" : {} {} {}", op.operands[0]->type.str(), insert ? "into" : "to",
                         resultType.str());
      return;
    }
    case OpKind::TensorCast:
      out += fmt::format(" {} : {} to {}", ref(op.operands[0]), op.operands[0]->type.str(),
                         resultType.str());
      return;
    case OpKind::TensorConcat: {
      std::vector<std::string> refs, types;
      for (const Value *v : op.operands) {
        refs.push_back(ref(v));
        types.push_back(v->type.str());
      }
      out += fmt::format(" dim({}) {} : ({}) -> {}", concatDim(op), fmt::join(refs, ", "),
                         fmt::join(types, ", "), resultType.str());
      return;
    }
    case OpKind::LinalgMatmul:
    case OpKind::LinalgBatchMatmul:
      if (op.hasAttr("indexing_maps"))
        out += " " + indexingMaps(op);
      if (op.hasAttr(kConfigAttr))
        out += fmt::format(" {{{}}}", configEntry(op));
      out += insOuts(op) + " -> " + resultType.str();
      return;
    case OpKind::LinalgTranspose:
      out += insOuts(op) + " permutation = " + intList(op.attr("permutation").list());
      return;
    case OpKind::LinalgBroadcast:
      out += insOuts(op) + " dimensions = " + intList(op.attr("dimensions").list());
      return;
    case OpKind::LinalgSoftmax:
      out += fmt::format(" dimension({}){} -> {}", op.attr("dimension").integer(), insOuts(op),
                         resultType.str());
      return;
    case OpKind::LinalgReduce: {
      out += insOuts(op) + " dimensions = " + intList(op.attr("dimensions").list()) + " (";
      const Block &body = *op.regions[0];
      for (size_t i = 0; i < body.arguments.size(); ++i)
        out += fmt::format("{}%{}: {}", i ? ", " : "", nameOf(body.arguments[i].get()),
                           body.arguments[i]->type.str());
      out += ") ";
      printRegion(body, indent, false);
      return;
    }
    case OpKind::Gather:
      out += " dimension_map = " + intList(op.attr("dimension_map").list()) + insOuts(op) + " -> " +
             resultType.str();
      return;
    case OpKind::TopK:
      out += fmt::format(" dimension({}){} ", op.attr("dimension").integer(), insOuts(op));
      printRegion(*op.regions[0], indent, true);
      out += " -> " + resultTypes(op);
      return;
    case OpKind::Attention: {
      out += " {" + indexingMaps(op);
      if (op.hasAttr(kConfigAttr))
        out += ", " + configEntry(op);
      out += "}" + insOuts(op) + " ";
      printRegion(*op.regions[0], indent, true);
      out += " -> " + resultType.str();
      return;
    }
    case OpKind::ExtYield:
    case OpKind::ScfYield:
      if (!op.operands.empty())
        out += " " + operandsAndTypes(op.operands, 0, op.operands.size());
      return;
    case OpKind::ScfIf:
      out += " " + ref(op.operands[0]);
      if (!op.results.empty())
        out += " -> (" + resultTypes(op) + ")";
      out += " ";
      printRegion(*op.regions[0], indent, false);
      if (!op.regions[1]->ops.empty()) {
        out += " else ";
        printRegion(*op.regions[1], indent, false);
      }
      return;
    case OpKind::ScfFor: {
      const Block &body = *op.regions[0];
      out += fmt::format(" %{} = {} to {} step {}", nameOf(body.arguments[0].get()),
                         ref(op.operands[0]), ref(op.operands[1]), ref(op.operands[2]));
      if (op.operands.size() > 3) {
        out += " iter_args(";
        for (size_t i = 3; i < op.operands.size(); ++i)
          out += fmt::format("{}%{} = {}", i > 3 ? ", " : "", nameOf(body.arguments[i - 2].get()),
                             ref(op.operands[i]));
        out += ") -> (" + resultTypes(op) + ")";
      }
      out += " ";
      printRegion(body, indent, false);
      return;
    }
    case OpKind::AssumeInt: {
      out += " " + ref(op.operands[0]) + "<";
      bool first = true;
      for (const char *key : {"umin", "umax", "udiv"})
        if (op.hasAttr(key)) {
          out += fmt::format("{}{} = {}", first ? "" : ", ", key, op.attr(key).integer());
          first = false;
        }
      out += "> : " + resultType.str();
      return;
    }
    case OpKind::DispatchRegion: {
      out += " -> (";
      size_t next = 0;
      for (size_t i = 0; i < op.results.size(); ++i) {
        const Type &t = op.results[i]->type;
        out += (i ? ", " : "") + t.str();
        if (t.numDynamicDims() > 0) {
          out += "{";
          for (int64_t k = 0; k < t.numDynamicDims(); ++k)
            out += (k ? ", " : "") + ref(op.operands[next++]);
          out += "}";
        }
      }
      out += ") ";
      printRegion(*op.regions[0], indent, false);
      return;
    }
    default: internalError(fmt::format("no printer for '{}'", op.name()));
    }
  }
};

} // namespace

std::string printFunction(const FuncOp &function) {
  Printer p;
  p.printFunction(function, 0);
  return p.out;
}

std::string printModule(const ModuleOp &module) {
  Printer p;
  if (module.name.empty())
    p.out += "module {\n";
  else
    p.out += fmt::format("module {} {{\n", symbolRef(module.name));
  for (size_t i = 0; i < module.functions.size(); ++i) {
    if (i)
      p.out += "\n";
    p.printFunction(*module.functions[i], 2);
  }
  p.out += "}\n";
  return p.out;
}

} // namespace frank
