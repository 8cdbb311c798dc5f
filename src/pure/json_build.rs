//! `json!`: serde_json's macro with the same grammar and the same `Value`s, built with less
//! code. serde_json's expands every object member into a key `String` made in place, a map
//! insert and a drop of the value it displaced; this one calls [`put`] once per member (one
//! shared function), and [`map`] once per object. Flowgate builds a few hundred objects this
//! way, mostly on cold paths (console answers, errors), where the bundle's size matters more
//! than a call per member. Arrays and the other values expand as serde_json's do.

use serde_json::{Map, Value};

/// An empty object's map.
#[inline(never)]
pub fn map() -> Map<String, Value> {
    Map::new()
}

/// Sets `key` to `value` in `map` (a later member of the same name replaces the value in
/// place, as serde_json's `json!` does).
#[inline(never)]
pub fn put(map: &mut Map<String, Value>, key: &str, value: Value) {
    map.insert(key.to_owned(), value);
}

/// `serde_json::to_value(v)`, compiled once per type rather than at each member. It cannot
/// fail for the types Flowgate passes (no map with keys that are not strings); as in
/// serde_json's `json!`, a failure would be a panic.
#[inline(never)]
pub fn value<T: serde::Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

/// serde_json's `json!` (same grammar, same result), with objects built by [`map`] and [`put`].
#[macro_export]
macro_rules! json {
    // Arrays: as serde_json's.
    (@array [$($elems:expr,)*]) => { ::std::vec![$($elems,)*] };
    (@array [$($elems:expr),*]) => { ::std::vec![$($elems),*] };
    (@array [$($elems:expr,)*] null $($rest:tt)*) => {
        $crate::json!(@array [$($elems,)* $crate::json!(null)] $($rest)*)
    };
    (@array [$($elems:expr,)*] true $($rest:tt)*) => {
        $crate::json!(@array [$($elems,)* $crate::json!(true)] $($rest)*)
    };
    (@array [$($elems:expr,)*] false $($rest:tt)*) => {
        $crate::json!(@array [$($elems,)* $crate::json!(false)] $($rest)*)
    };
    (@array [$($elems:expr,)*] [$($array:tt)*] $($rest:tt)*) => {
        $crate::json!(@array [$($elems,)* $crate::json!([$($array)*])] $($rest)*)
    };
    (@array [$($elems:expr,)*] {$($map:tt)*} $($rest:tt)*) => {
        $crate::json!(@array [$($elems,)* $crate::json!({$($map)*})] $($rest)*)
    };
    (@array [$($elems:expr,)*] $next:expr, $($rest:tt)*) => {
        $crate::json!(@array [$($elems,)* $crate::json!($next),] $($rest)*)
    };
    (@array [$($elems:expr,)*] $last:expr) => {
        $crate::json!(@array [$($elems,)* $crate::json!($last)])
    };
    (@array [$($elems:expr),*] , $($rest:tt)*) => {
        $crate::json!(@array [$($elems,)*] $($rest)*)
    };

    // Objects: each member through `put`.
    (@object $object:ident () () ()) => {};
    (@object $object:ident [$($key:tt)+] ($value:expr) , $($rest:tt)*) => {
        $crate::pure::json_build::put(&mut $object, ::core::convert::AsRef::<str>::as_ref(&($($key)+)), $value);
        $crate::json!(@object $object () ($($rest)*) ($($rest)*));
    };
    (@object $object:ident [$($key:tt)+] ($value:expr)) => {
        $crate::pure::json_build::put(&mut $object, ::core::convert::AsRef::<str>::as_ref(&($($key)+)), $value);
    };
    (@object $object:ident ($($key:tt)+) (: null $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object [$($key)+] ($crate::json!(null)) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: true $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object [$($key)+] ($crate::json!(true)) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: false $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object [$($key)+] ($crate::json!(false)) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: [$($array:tt)*] $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object [$($key)+] ($crate::json!([$($array)*])) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: {$($map:tt)*} $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object [$($key)+] ($crate::json!({$($map)*})) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: $value:expr , $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object [$($key)+] ($crate::json!($value)) , $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: $value:expr) $copy:tt) => {
        $crate::json!(@object $object [$($key)+] ($crate::json!($value)));
    };
    (@object $object:ident () (($key:expr) : $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object ($key) (: $($rest)*) (: $($rest)*));
    };
    (@object $object:ident ($($key:tt)*) ($tt:tt $($rest:tt)*) $copy:tt) => {
        $crate::json!(@object $object ($($key)* $tt) ($($rest)*) ($($rest)*));
    };

    (null) => { ::serde_json::Value::Null };
    (true) => { ::serde_json::Value::Bool(true) };
    (false) => { ::serde_json::Value::Bool(false) };
    ([]) => { ::serde_json::Value::Array(::std::vec![]) };
    ([ $($tt:tt)+ ]) => { ::serde_json::Value::Array($crate::json!(@array [] $($tt)+)) };
    ({}) => { ::serde_json::Value::Object(::serde_json::Map::new()) };
    ({ $($tt:tt)+ }) => {
        ::serde_json::Value::Object({
            let mut object = $crate::pure::json_build::map();
            $crate::json!(@object object () ($($tt)+) ($($tt)+));
            object
        })
    };
    // Any Serialize value, as serde_json's (which cannot fail for the types Flowgate passes).
    ($other:expr) => { $crate::pure::json_build::value(&$other) };
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    #[test]
    fn builds_what_serde_json_builds() {
        let name = String::from("n");
        let key = String::from("dyn");
        let n = 3u64;
        let opt: Option<&str> = None;
        let ours: Value = crate::json!({
            "a": 1, "b": [1, "x", null, true, false, {"c": {}}, []], "name": name, "n": n + 1,
            (key.as_str()): opt, "nested": {"d": {"e": [n]}}, "f": false, "t": true, "z": null, "a": 2,
        });
        let theirs: Value = serde_json::json!({
            "a": 1, "b": [1, "x", null, true, false, {"c": {}}, []], "name": name, "n": n + 1,
            (key.as_str()): opt, "nested": {"d": {"e": [n]}}, "f": false, "t": true, "z": null, "a": 2,
        });
        assert_eq!(ours, theirs);
        // Member order is kept (preserve_order), a repeated member replacing its value in place.
        assert_eq!(serde_json::to_string(&ours).unwrap(), serde_json::to_string(&theirs).unwrap());
        assert_eq!(crate::json!([]), serde_json::json!([]));
        assert_eq!(crate::json!({}), serde_json::json!({}));
        assert_eq!(crate::json!("s"), serde_json::json!("s"));
    }
}
