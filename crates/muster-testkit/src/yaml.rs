//! The repository's YAML (the OpenAPI document, the Kubernetes manifests) as JSON values, for
//! the tests that check it. Mapping keys become strings (`'200'` and `200` alike); what has no
//! JSON form or no use in these files (unparsable values, non-finite numbers, keys that are neither
//! strings nor integers, a key given twice, as `200` and `'200'`) is an error that says where it is.

use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// Every document of a YAML text, as JSON. An empty document is `null`.
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    YamlLoader::load_from_str(text)
        .map_err(|e| format!("not valid YAML: {e}"))?
        .iter()
        .map(|doc| to_json(doc, ""))
        .collect()
}

/// A YAML node as JSON; `at` is where it stands (`/key` and `[index]` from the top), for the error.
fn to_json(node: &Yaml, at: &str) -> Result<Value, String> {
    Ok(match node {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(text) => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{at}: unusable number {text:?}"))?,
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| to_json(item, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (key, value) in hash {
                let key = match key {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    other => return Err(format!("{at}: mapping key {other:?} is not a string")),
                };
                let value = to_json(value, &format!("{at}/{key}"))?;
                if map.insert(key.clone(), value).is_some() {
                    return Err(format!("{at}: duplicate key {key:?}"));
                }
            }
            Value::Object(map)
        }
        // The loader resolves aliases; an alias it could not resolve is a `BadValue`.
        Yaml::Alias(_) | Yaml::BadValue => return Err(format!("{at}: unparsable YAML value")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_become_strings_and_numbers_stay_numbers() {
        let docs = documents("a: 1\n200: [x, 2.5, true, null]\n---\n").unwrap();
        assert_eq!(
            docs,
            vec![json!({"a": 1, "200": ["x", 2.5, true, null]}), Value::Null]
        );
    }

    #[test]
    fn what_has_no_json_form_is_an_error_that_says_where() {
        let err = |text| documents(text).unwrap_err();
        assert_eq!(
            err("a:\n  200: 1\n  '200': 2\n"),
            "/a: duplicate key \"200\""
        );
        assert_eq!(
            err("a: [1, {true: 2}]\n"),
            "/a[1]: mapping key Boolean(true) is not a string"
        );
        assert!(err("a: [").starts_with("not valid YAML"));
    }
}
